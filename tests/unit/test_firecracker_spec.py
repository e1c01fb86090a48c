"""Every call the Firecracker driver makes, and every section of the configuration it boots from,
checked against Firecracker's published API spec (v1.16.1; see firecracker_spec.py for where the
spec is read from). The checker itself is checked first, on schemas written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sanbox.host.drivers import NetAttachment, VmSpec
from sanbox.host.drivers.firecracker import api
from sanbox.host.drivers.firecracker.config import FirecrackerPaths, vm_config
from sanbox.host.drivers.firecracker.jail import jailed_paths

from .firecracker_spec import SPEC_VERSION, SchemaError, body_schema, check, load_spec, operation

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded = load_spec()
    if isinstance(loaded, str):
        pytest.skip(loaded)
    return loaded


def every_call() -> list[api.ApiCall]:
    state, mem = Path("/run/s/vmstate"), Path("/run/s/vmstate.mem")
    return [
        api.instance_info(),
        api.version(),
        api.vm_config(),
        api.machine_config(),
        api.set_machine_config(2, 1024),
        api.pause(),
        api.resume(),
        api.start(),
        api.ctrl_alt_del(),
        api.create_snapshot(state, mem),
        api.load_snapshot(state, mem),
        api.load_snapshot(state, mem, False, Path("/run/x/agent.sock"), (("net0", "tap7"),)),
        api.set_balloon(128),
        api.resize_balloon(64),
        api.update_drive("root", Path("/rootfs.raw")),
    ]


def a_spec(tmp: Path, net: bool) -> VmSpec:
    attachment = NetAttachment("tap3", "06:00:0a:00:00:02", "10.0.0.2/30", "10.0.0.1", "10.0.0.1")
    return VmSpec(
        name="c1",
        kernel=tmp / "vmlinux",
        initrd=tmp / "initrd",
        disk=tmp / "disk.raw",
        run_dir=tmp / "run",
        console_log=tmp / "logs" / "console.log",
        vcpus=2,
        memory_mib=1024,
        net=attachment if net else None,
    )


# the checker, on schemas of its own


def test_checker_refuses_what_firecracker_would() -> None:
    schema = {
        "type": "object",
        "required": ["state"],
        "properties": {
            "state": {"type": "string", "enum": ["Paused", "Resumed"]},
            "n": {"type": "integer", "minimum": 1, "maximum": 32},
        },
    }
    check({"state": "Paused", "n": 3}, schema, {})
    for bad, words in [
        ({}, "'state' is required"),
        ({"state": "Stopped"}, "not one of"),
        ({"state": "Paused", "x": 1}, "not a field"),
        ({"state": "Paused", "n": True}, "not of type integer"),
        ({"state": "Paused", "n": 33}, "above 32"),
        ({"state": "Paused", "n": 0}, "below 1"),
    ]:
        with pytest.raises(SchemaError, match=words):
            check(bad, schema, {})
    with pytest.raises(SchemaError, match="does not know"):
        check({}, {"type": "object", "oneOf": []}, {})


# against the spec


def test_the_spec_is_the_release_named(spec: dict[str, Any]) -> None:
    assert spec["swagger"] == "2.0"
    assert spec["info"]["version"] == SPEC_VERSION


def test_every_endpoint_the_driver_calls_is_in_the_spec(spec: dict[str, Any]) -> None:
    for method, path in sorted(api.ENDPOINTS):
        operation(spec, method, path)
    assert {api.endpoint_of(call) for call in every_call()} == api.ENDPOINTS


@pytest.mark.parametrize("call", every_call(), ids=lambda c: f"{c.method} {c.path}")
def test_every_body_fits_its_schema(spec: dict[str, Any], call: api.ApiCall) -> None:
    method, path = api.endpoint_of(call)
    schema = body_schema(spec, method, path)
    if call.body is None:
        assert schema is None, f"{method} {path} takes a body"
        return
    assert schema is not None, f"{method} {path} takes no body"
    check(call.body, schema, spec)


def test_the_memory_is_loaded_from_a_file_mapping(spec: dict[str, Any]) -> None:
    body = api.load_snapshot(Path("/s"), Path("/m")).body
    assert body is not None
    assert body["mem_backend"] == {"backend_type": "File", "backend_path": "/m"}
    assert "mem_file_path" not in body  # deprecated in favour of mem_backend
    schema = spec["definitions"]["MemoryBackend"]["properties"]["backend_type"]
    assert "File" in schema["enum"]


@pytest.mark.parametrize("net", [False, True])
@pytest.mark.parametrize("jailed", [False, True])
def test_the_config_file_is_a_full_vm_configuration(
    spec: dict[str, Any], tmp_path: Path, net: bool, jailed: bool
) -> None:
    vm = a_spec(tmp_path, net)
    paths = jailed_paths() if jailed else FirecrackerPaths.direct(vm)
    config = vm_config(vm, paths)
    check(config, spec["definitions"]["FullVmConfiguration"], spec)
    sections = {"boot-source", "drives", "machine-config", "network-interfaces", "vsock"}
    assert sections | {"logger", "metrics", "entropy"} == set(config)
    # each section is also what its own pre-boot endpoint takes
    for path, section in [
        ("/boot-source", config["boot-source"]),
        ("/machine-config", config["machine-config"]),
        ("/vsock", config["vsock"]),
        ("/logger", config["logger"]),
        ("/metrics", config["metrics"]),
        ("/entropy", config["entropy"]),
        ("/drives/{drive_id}", config["drives"][0]),
        *[("/network-interfaces/{iface_id}", n) for n in config["network-interfaces"]],
    ]:
        schema = body_schema(spec, "PUT", path)
        assert schema is not None
        check(section, schema, spec)
