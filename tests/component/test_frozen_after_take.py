"""A snapshot or fork whose host stopped its source's vCPUs for the save and then failed to let
them run again (a monitor that did not answer `cont`) used to answer "still running as it was"
while the VM stayed frozen, so every later command hung. The failure now continues the VM once
more and says running only if it runs; one that stays frozen puts the computer in error, and
the answer says so. The local 'VM' stands in for a hypervisor: its vCPUs stopped are the
process stopped (SIGSTOP), as `LocalVm.frozen` reads them."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

import pytest

from sanbox.host.drivers.local.launch import LocalVm
from sanbox.host.errors import HostError

from .conftest import Server
from .test_api_computers import create

pytestmark = pytest.mark.component


class Monitor:
    """The local 'VM' stopped by the host as QEMU's `stop` does; `continue_running` fails its
    first `failures` calls (None: every call), then continues it as `cont` does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failures: int | None) -> None:
        self.failures = failures
        self.stopped: list[int] = []
        real = LocalVm.continue_running

        async def stop(vm: LocalVm) -> None:
            os.kill(vm.pid, signal.SIGSTOP)
            self.stopped.append(vm.pid)

        async def cont(vm: LocalVm) -> None:
            if self.failures is None or self.failures > 0:
                if self.failures is not None:
                    self.failures -= 1
                raise HostError("the monitor did not answer `cont` in time")
            await real(vm)

        monkeypatch.setattr(LocalVm, "pause", stop)
        monkeypatch.setattr(LocalVm, "continue_running", cont)


@pytest.fixture
def monitor(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int | None], Monitor]]:
    """A `Monitor` with `failures`; what it left stopped is continued before the server deletes
    the computers (a stopped process ends only at its kill's timeout)."""
    made: list[Monitor] = []

    def monitor(failures: int | None) -> Monitor:
        made.append(Monitor(monkeypatch, failures))
        return made[-1]

    yield monitor
    for pid in {pid for m in made for pid in m.stopped}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def frozen(server: Server, name: str) -> bool | None:
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    cid = server.client.get(f"/v1/computers/{name}", headers=server.headers()).json()["id"]
    machine = fleet.machines.get(cid)
    if machine is None:
        return None
    assert server.client.portal is not None
    result: bool | None = server.client.portal.call(machine.vm.frozen)
    return result


def events(server: Server, name: str) -> list[str]:
    r = server.client.get(f"/v1/computers/{name}/events", headers=server.headers())
    return [e["type"] for e in r.json()["events"]]


def test_a_snapshot_that_leaves_the_vm_frozen_puts_it_in_error_and_says_so(
    server: Server, monitor: Callable[[int | None], Monitor]
) -> None:
    h = server.headers()
    create(server, name="f")
    monitor(None)
    r = server.client.post("/v1/computers/f/snapshots", json={}, headers=h)
    assert r.status_code == 500, r.text
    message = r.json()["error"]["message"]
    assert "running as it was" not in message
    assert message.endswith(
        "no snapshot was kept; its VM stayed frozen (its vCPUs could not be run again) and was "
        "ended: the computer is in error; start it again (it boots afresh on its disk)"
    )
    got = server.client.get("/v1/computers/f", headers=h).json()
    assert got["state"] == "error" and "stayed frozen" in got["last_error"]
    assert server.client.get("/v1/snapshots", headers=h).json()["snapshots"] == []
    started = server.client.post("/v1/computers/f/start", headers=h)  # as it says
    assert started.status_code == 200 and started.json()["state"] == "running", started.text


def test_a_snapshot_whose_continue_failed_once_runs_on_and_serves_commands(
    server: Server, monitor: Callable[[int | None], Monitor]
) -> None:
    h = server.headers()
    create(server, name="f")
    monitor(1)
    r = server.client.post("/v1/computers/f/snapshots", json={}, headers=h)
    assert r.status_code == 500, r.text
    assert r.json()["error"]["message"].endswith("the computer is still running as it was")
    assert frozen(server, "f") is False
    assert server.client.get("/v1/computers/f", headers=h).json()["state"] == "running"
    assert "computer.continued" in events(server, "f")
    ran = server.client.post("/v1/computers/f/exec", json={"cmd": ["echo", "on"]}, headers=h)
    assert ran.status_code == 200 and ran.json()["stdout"] == "on\n"


def test_a_fork_that_leaves_its_source_frozen_puts_it_in_error_and_says_so(
    server: Server, monitor: Callable[[int | None], Monitor]
) -> None:
    h = server.headers()
    create(server, name="src")
    monitor(None)
    r = server.client.post("/v1/computers/src/fork", json={"count": 1}, headers=h)
    assert r.status_code == 500, r.text
    message = r.json()["error"]["message"]
    assert "running as it was" not in message
    assert message.endswith(
        "the computer is in error; start it again (it boots afresh on its disk)"
    )
    assert server.client.get("/v1/computers/src", headers=h).json()["state"] == "error"
    names = [c["name"] for c in server.client.get("/v1/computers", headers=h).json()["computers"]]
    assert names == ["src"]  # no child kept
