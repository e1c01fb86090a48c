"""The Firecracker VM handle and its API client, against a real HTTP server on a Unix socket that
answers as Firecracker's API does (a stand-in: it keeps a state, answers `GET /` and refuses
what Firecracker would refuse), and a real process standing in for the VM's (its command line
carries `--id`, as Firecracker's does): liveness, pause/resume, snapshot calls, kill. Every
request the server gets is also checked against Firecracker's API spec where it is present."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sanbox.host.drivers import Liveness, VmSpec
from sanbox.host.drivers.firecracker import api
from sanbox.host.drivers.firecracker.driver import FirecrackerHypervisor, capabilities
from sanbox.host.drivers.firecracker.errors import (
    FirecrackerApiError,
    FirecrackerConfigError,
    NotSupportedError,
)
from sanbox.host.drivers.firecracker.jail import on_host
from sanbox.host.drivers.firecracker.vm import (
    RECORD,
    FirecrackerVm,
    VmRecord,
    liveness,
    memory_of,
)

from .firecracker_spec import body_schema, check, load_spec

pytestmark = pytest.mark.unit


class FakeFirecrackerApi:
    """HTTP/1.1 on a Unix socket: one request per connection, as the client sends them."""

    def __init__(self, path: Path, jail: Path | None = None) -> None:
        self.path = path
        self.jail = jail  # paths in requests are inside this chroot
        self.state = "Running"
        self.loaded: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, Any]] = []

    def seen(self, path: str) -> Path:
        return Path(path) if self.jail is None else on_host(self.jail, Path(path))

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        if (method, path) == ("GET", "/"):
            return 200, {
                "id": "sanbox-c1",
                "state": self.state,
                "vmm_version": "1.16.1",
                "app_name": "Firecracker",
            }
        if (method, path) == ("PATCH", "/vm"):
            self.state = "Paused" if body["state"] == "Paused" else "Running"
            return 204, None
        if (method, path) == ("PUT", "/snapshot/create"):
            if self.state != "Paused":
                return 400, {"fault_message": "the microVM must be paused"}
            if not self.seen(body["snapshot_path"]).parent.is_dir():
                return 400, {"fault_message": "Cannot create snapshot file: No such directory"}
            self.seen(body["snapshot_path"]).write_bytes(b"state")
            self.seen(body["mem_file_path"]).write_bytes(b"memory")
            return 204, None
        if (method, path) == ("PUT", "/snapshot/load"):
            self.loaded = {
                "state": self.seen(body["snapshot_path"]).read_bytes(),
                "memory": self.seen(body["mem_backend"]["backend_path"]).read_bytes(),
            }
            self.state = "Running" if body["resume_vm"] else "Paused"
            return 204, None
        if (method, path) == ("PATCH", "/drives/root"):
            return 204, None
        return 400, {"fault_message": f"unexpected {method} {path}"}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            method, path, _ = head.split("\r\n")[0].split(" ")
            headers = dict(
                line.lower().split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line
            )
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            status, doc = self.answer(method, path, json.loads(raw) if raw else None)
            data = b"" if doc is None else json.dumps(doc).encode()
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\n"
                "Content-Type: application/json\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        finally:
            writer.close()
            await writer.wait_closed()


@pytest.fixture
def process() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line has `--id sanbox-c1`, as the VM's Firecracker has."""
    code = "import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, "--id", "sanbox-c1"])
    deadline = time.monotonic() + 10.0  # until its exec is done and its command line shows
    while liveness(proc.pid, "sanbox-c1") is not Liveness.ALIVE:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    yield proc
    proc.kill()
    proc.wait()


async def with_vm(
    tmp_path: Path, pid: int, jail: Path | None = None
) -> AsyncIterator[tuple[FirecrackerVm, FakeFirecrackerApi]]:
    sock = tmp_path / "firecracker.sock"
    fake = FakeFirecrackerApi(sock, jail)
    server = await asyncio.start_unix_server(fake._serve, path=str(sock))
    owner = (os.getuid(), os.getgid())
    record = VmRecord(
        pid,
        "sanbox-c1",
        str(sock),
        str(tmp_path / "agent.sock"),
        "/d.raw",
        jail=None if jail is None else str(jail),
        owner=None if jail is None else owner,
    )
    async with server:
        yield FirecrackerVm(record, tmp_path), fake


def test_liveness_by_id_in_the_command_line() -> None:
    def proc(cmdline: bytes, state: str = "S") -> Any:
        return lambda pid: (cmdline, state)

    fc = b"/firecracker\0--id\0sanbox-c1\0--api-sock\0/api.sock\0"
    assert liveness(1, "sanbox-c1", proc(fc)) is Liveness.ALIVE
    assert liveness(1, "sanbox-c1", proc(fc, "Z")) is Liveness.DEAD
    assert liveness(1, "sanbox-c", proc(fc)) is Liveness.DEAD  # a prefix is another VM
    assert liveness(1, "sanbox-c1", proc(b"/bin/sleep\0100\0")) is Liveness.DEAD

    def fails(errno_: int) -> Any:
        def read(pid: int) -> tuple[bytes, str]:
            raise OSError(errno_, "x")

        return read

    assert liveness(1, "sanbox-c1", fails(3)) is Liveness.DEAD  # ESRCH
    assert liveness(1, "sanbox-c1", fails(24)) is Liveness.UNKNOWN  # EMFILE


def test_pause_snapshot_resume_and_kill(tmp_path: Path, process: subprocess.Popen[bytes]) -> None:
    async def scenario() -> list[tuple[str, str, Any]]:
        async for vm, fake in with_vm(tmp_path, process.pid):
            assert vm.alive()
            assert await vm.frozen() is False
            vmstate = tmp_path / "vmstate"
            assert await vm.save_state(vmstate) is True  # the RAM is saved beside the state
            assert vmstate.read_bytes() == b"state"
            assert memory_of(vmstate).read_bytes() == b"memory"
            assert await vm.frozen() is True
            await vm.continue_running()
            assert fake.state == "Running"
            with pytest.raises(FirecrackerApiError, match="must be paused"):
                await vm.api.send(api.create_snapshot(vmstate, memory_of(vmstate)))
            await vm.kill(timeout=5.0)
            assert not vm.alive()
            with pytest.raises(Exception, match="is gone"):
                await vm.pause()
            return fake.requests
        raise AssertionError("no VM")

    requests = asyncio.run(scenario())
    assert [(m, p) for m, p, _ in requests] == [
        ("GET", "/"),
        ("PATCH", "/vm"),
        ("PUT", "/snapshot/create"),
        ("GET", "/"),
        ("PATCH", "/vm"),
        ("PUT", "/snapshot/create"),
    ]
    spec = load_spec()
    if isinstance(spec, dict):  # what went over the wire, against the spec too
        for method, path, body in requests:
            schema = body_schema(spec, method, path)
            assert (schema is None) == (body is None)
            if schema is not None:
                check(body, schema, spec)


def test_a_failed_snapshot_lets_the_vm_run_again(
    tmp_path: Path, process: subprocess.Popen[bytes]
) -> None:
    async def scenario() -> None:
        async for vm, fake in with_vm(tmp_path, process.pid):
            with pytest.raises(FirecrackerApiError, match="refused"):
                await vm.save_state(tmp_path / "absent-dir" / "vmstate")
            assert fake.state == "Running"

    asyncio.run(scenario())


def test_no_live_disk_switch(tmp_path: Path) -> None:
    vm = FirecrackerVm(VmRecord(1, "sanbox-c1", "/a", "/v", "/d"), tmp_path)
    with pytest.raises(NotSupportedError, match="not supported by firecracker"):
        asyncio.run(vm.switch_disk(tmp_path / "overlay.qcow2"))
    with pytest.raises(NotSupportedError, match="not supported by firecracker"):
        asyncio.run(vm.stream_disk(tmp_path / "base.raw"))


def test_an_api_that_does_not_answer(tmp_path: Path) -> None:
    client = api.FirecrackerApi(tmp_path / "absent.sock", timeout=1.0)
    with pytest.raises(FirecrackerApiError, match="did not answer"):
        asyncio.run(client.send(api.instance_info()))
    with pytest.raises(FirecrackerApiError, match="not a call this driver makes"):
        asyncio.run(client.send(api.ApiCall("PUT", "/mmds", {})))
    assert api.fault_of(400, '{"fault_message": "bad"}') == "bad"
    assert api.fault_of(500, "") == "HTTP 500"


def test_capabilities() -> None:
    caps = capabilities()
    assert caps.disk_formats == ("raw",)
    assert caps.live_disk_switch is False
    assert caps.maps_read_only is False and caps.memory_overhead_mib == 0
    assert (caps.snapshot_format, caps.confinement, caps.agent_channel) == (
        "firecracker",
        "jailer",
        "vsock",
    )


def test_records_and_attach(tmp_path: Path, process: subprocess.Popen[bytes]) -> None:
    record = VmRecord(process.pid, "sanbox-c1", "/a", "/v", "/d", "/m", "tap3", "/j", (990, 990))
    assert VmRecord.loads(record.dumps()) == record
    hv = FirecrackerHypervisor(Path("/usr/bin/firecracker"))
    assert hv.attach(tmp_path) is None  # no record
    (tmp_path / RECORD).write_text("{not json")
    assert hv.attach(tmp_path) is None
    (tmp_path / RECORD).write_text(record.dumps())
    vm = hv.attach(tmp_path)
    assert vm is not None and vm.pid == process.pid and vm.isolation == "firecracker-kvm"
    dead = VmRecord(process.pid, "sanbox-other", "/a", "/v", "/d")
    (tmp_path / RECORD).write_text(dead.dumps())
    assert hv.attach(tmp_path) is None  # that pid is not this VM's


def spec_for(tmp_path: Path, disk: bytes) -> VmSpec:
    for name in ("vmlinux", "initrd"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "disk").write_bytes(disk)
    return VmSpec(
        "c1",
        tmp_path / "vmlinux",
        tmp_path / "initrd",
        tmp_path / "disk",
        tmp_path / "run",
        tmp_path / "logs" / "console.log",
    )


def test_boot_refuses_a_qcow2_disk_before_starting_anything(tmp_path: Path) -> None:
    hv = FirecrackerHypervisor(tmp_path / "firecracker")
    with pytest.raises(FirecrackerConfigError, match="qcow2"):
        asyncio.run(hv.boot(spec_for(tmp_path, b"QFI\xfb" + b"\0" * 60)))
    assert not (tmp_path / "run" / "vm.pid").exists()


def test_a_firecracker_that_exits_says_why(tmp_path: Path) -> None:
    fake = tmp_path / "firecracker"
    fake.write_text("#!/bin/sh\necho 'Firecracker: no KVM here' >&2\nexit 1\n")
    fake.chmod(0o755)
    spec = spec_for(tmp_path, b"\0" * 512)
    with pytest.raises(Exception, match="Firecracker failed to start: .*no KVM here"):
        asyncio.run(FirecrackerHypervisor(fake).boot(spec))
    config = json.loads((spec.run_dir / "firecracker.json").read_text())
    assert config["drives"][0]["path_on_host"] == str(spec.disk)


def test_a_jailed_vm_s_snapshot_leaves_the_jail_and_comes_back(
    tmp_path: Path, process: subprocess.Popen[bytes]
) -> None:
    """Firecracker writes and reads its snapshot inside its chroot: the driver moves a saved
    state out to where the caller wants it, and puts a state to load back in (the device
    state copied, the memory linked: the same file, mapped privately by Firecracker)."""
    jail = tmp_path / "jail"
    jail.mkdir()
    saved = tmp_path / "saved"
    saved.mkdir()

    async def scenario() -> FakeFirecrackerApi:
        async for vm, fake in with_vm(tmp_path, process.pid, jail):
            assert await vm.save_state(saved / "vmstate") is True
            assert (saved / "vmstate").read_bytes() == b"state"
            assert memory_of(saved / "vmstate").read_bytes() == b"memory"
            assert not list(jail.iterdir())  # nothing left in the jail
            await vm.load_state(saved / "vmstate")
            return fake
        raise AssertionError("no VM")

    fake = asyncio.run(scenario())
    assert fake.loaded == {"state": b"state", "memory": b"memory"}
    method, path, body = fake.requests[-1]
    assert (method, path) == ("PUT", "/snapshot/load")
    assert body["snapshot_path"] == "/snapshot"
    assert body["mem_backend"] == {"backend_type": "File", "backend_path": "/snapshot.mem"}
    assert body["vsock_override"] == {"uds_path": "/agent.sock"}
    linked, original = jail / "snapshot.mem", memory_of(saved / "vmstate")
    assert os.stat(linked).st_ino == os.stat(original).st_ino
    assert os.stat(jail / "snapshot").st_ino != os.stat(saved / "vmstate").st_ino


def test_a_disk_grows_and_firecracker_is_told(
    tmp_path: Path, process: subprocess.Popen[bytes]
) -> None:
    disk = tmp_path / "d.raw"
    disk.write_bytes(b"\0" * 4096)

    async def scenario() -> FakeFirecrackerApi:
        async for vm, fake in with_vm(tmp_path, process.pid):
            vm.record = dataclasses.replace(vm.record, disk=str(disk))
            await vm.grow_disk(1 << 20)
            with pytest.raises(FirecrackerConfigError, match="not shrunk"):
                await vm.grow_disk(4096)
            return fake
        raise AssertionError("no VM")

    fake = asyncio.run(scenario())
    assert disk.stat().st_size == 1 << 20
    assert fake.requests[-1] == (
        "PATCH",
        "/drives/root",
        {"drive_id": "root", "path_on_host": str(disk)},
    )
