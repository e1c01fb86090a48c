"""The control plane reaches a host through one door: it imports nothing of `sanbox.host` but
`sanbox.host.door` (the `Host` protocol and the values, errors and ports that cross it), counting
imports only type checkers see; and `HostRuntime`, the in-process host, is a `Host`."""

from __future__ import annotations

import typing

import pytest

from sanbox.host import door
from sanbox.host.door import Host
from sanbox.host.runtime import HostRuntime

from .test_import_cycles import graph

pytestmark = pytest.mark.unit


def test_the_control_plane_imports_only_the_hosts_door() -> None:
    edges = graph(type_checking=True)
    control = [name for name in edges if name.startswith("sanbox.control")]
    assert len(control) > 20
    for name in control:
        host = {t for t in edges[name] if t.startswith("sanbox.host")}
        assert host <= {"sanbox.host.door"}, f"{name} imports {host - {'sanbox.host.door'}}"


def test_the_in_process_runtime_is_a_host() -> None:
    def door(runtime: HostRuntime) -> Host:
        return runtime  # mypy checks that the runtime has every call of the door

    assert door.__annotations__["return"] == "Host"
    calls = {n for n in vars(Host) if not n.startswith("_")}
    assert calls <= set(dir(HostRuntime))


def test_no_place_of_the_machine_crosses_the_door() -> None:
    """Every call is by computer id and values: no attribute, no path, no part of this machine
    (a data dir, a network), so a host reached over the network offers the same calls."""
    assert not getattr(Host, "__annotations__", {}), "the door has attributes"
    hints = {
        name: typing.get_type_hints(call, vars(door))
        for name, call in vars(Host).items()
        if callable(call) and not name.startswith("_")
    }
    assert len(hints) > 30
    for name, hint in hints.items():
        spelled = " ".join(str(t) for t in hint.values())
        for part in ("Path", "DataDir", "Network"):
            assert part not in spelled, f"Host.{name} passes a {part}: {spelled}"
