"""A transition whose caller leaves half-way (a streaming response whose client went, a cancelled
MCP call) is carried to its end, never left `resuming`, `pausing`, `starting` or `stopping`
(control/transition.py); a computer left so anyway is settled by the VM watcher's sweep
(control/interrupted.py settle_left); and a server restart in the middle of a suspend or a wake
ends the computer suspended, still woken by its next use, not paused."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sanbox.e2b.connect import envelope
from sanbox.host.door import Machine
from sanbox.host.runtime import HostRuntime
from sanbox.store.models import ComputerRow, Org

from .conftest import E2bStand, Server
from .test_api_computers import create
from .test_crash_recovery import as_the_crash_left, restart
from .test_honest_outcomes import plant_saved_state

pytestmark = pytest.mark.component


def state_of(server: Server, name: str) -> str:
    r = server.client.get(f"/v1/computers/{name}", headers=server.headers())
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


def wait_state(server: Server, name: str, state: str) -> None:
    deadline = time.monotonic() + 15
    while (now := state_of(server, name)) != state:
        assert time.monotonic() < deadline, f"{name} never {state}: still {now}"
        time.sleep(0.05)


def call(client: TestClient, fn: Any, *args: Any) -> Any:
    """`fn(*args)` on the server's event loop."""
    assert client.portal is not None
    return client.portal.call(fn, *args)


def org_of(server: Server, computer_id: str) -> Org:
    with server.client.app.state.db.session() as s:  # type: ignore[attr-defined]
        row = s.get(ComputerRow, computer_id)
        assert row is not None
        org: Org | None = s.get(Org, row.org_id)
        assert org is not None
        return org


def suspend(server: Server, monkeypatch: pytest.MonkeyPatch, name: str, saved: bool) -> str:
    """A computer suspended (woken by its next use): the stand-in keeps no memory, so its pause
    ends the VM (and with `saved` leaves a genuine saved state, as a pause does)."""
    cid = str(create(server, name=name)["id"])

    async def pause(self: HostRuntime, machine: Machine, *_args: Any) -> Any:
        await machine.vm.kill()
        if saved:
            plant_saved_state(server, cid)
        return SimpleNamespace(size=0, seconds=0.0)

    monkeypatch.setattr(HostRuntime, "pause", pause)
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    row = call(server.client, computers.pause, org_of(server, cid), cid, True)
    assert row.state == "suspended"
    return cid


class Gate:
    """A host step that waits, once entered, until opened (or forever)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.open = asyncio.Event()

    def around(self, real: Any) -> Any:
        async def step(*args: Any) -> Any:
            self.entered.set()
            await self.open.wait()
            return await real(*args)

        return step


def test_a_wake_whose_caller_leaves_runs_to_its_end(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = suspend(server, monkeypatch, "w", saved=False)
    gate = Gate()
    monkeypatch.setattr(HostRuntime, "resume", gate.around(HostRuntime.resume))
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    org = org_of(server, cid)

    async def scenario() -> None:
        call = asyncio.ensure_future(computers.exec(org, cid, ["true"], max_output=100))
        await gate.entered.wait()  # the wake has written `resuming`
        call.cancel()  # its caller goes (a client that disconnected)
        with pytest.raises(asyncio.CancelledError):
            await call
        gate.open.set()

    call(server.client, scenario)
    wait_state(server, "w", "running")
    ran = server.client.post(
        "/v1/computers/w/exec", json={"cmd": ["true"]}, headers=server.headers()
    )
    assert ran.status_code == 200 and ran.json()["exit_code"] == 0, ran.text
    events = server.client.get("/v1/computers/w/events", headers=server.headers()).json()["events"]
    assert events[-1]["type"] == "computer.woken"


def test_a_stop_whose_caller_leaves_ends_stopped(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = str(create(server, name="s")["id"])
    gate = Gate()
    monkeypatch.setattr(HostRuntime, "shutdown", gate.around(HostRuntime.shutdown))
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    org = org_of(server, cid)

    async def scenario() -> None:
        call = asyncio.ensure_future(computers.stop(org, cid))
        await gate.entered.wait()  # `stopping` written
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        gate.open.set()

    call(server.client, scenario)
    wait_state(server, "s", "stopped")
    r = server.client.post("/v1/computers/s/start", headers=server.headers())
    assert r.status_code == 200 and r.json()["state"] == "running", r.text


def test_the_watcher_s_sweep_settles_a_computer_left_on_its_way(server: Server) -> None:
    from sanbox.control.interrupted import settle_left  # here: a sweep the old code lacked

    h = server.headers()
    left = {
        "resumed": ("resuming", "running"),  # its VM runs: it runs on
        "stopped": ("stopping", "stopped"),
        "started": ("starting", "running"),
    }
    ids = {name: str(create(server, name=name)["id"]) for name in [*left, "busy"]}
    for name, (state, _) in left.items():
        as_the_crash_left(server, ids[name], state)
    as_the_crash_left(server, ids["busy"], "resuming")
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    busy = fleet.operations.begin(ids["busy"], "resume", None, "another-node")
    held = {name: fleet.machines[ids[name]] for name in ("resumed", "started")}

    report = call(server.client, settle_left, fleet)

    for name, (_, now) in left.items():
        assert state_of(server, name) == now, name
    assert state_of(server, "busy") == "resuming", "one another node carries on was touched"
    assert sorted(report.reattached) == sorted([ids["resumed"], ids["started"]])
    for name, machine in held.items():  # kept, not a second connection to its agent (QEMU's
        # channel takes one at a time: the second went unanswered, and the VM was killed)
        assert fleet.machines[ids[name]] is machine and not machine.agent.closed, name
    r = server.client.post("/v1/computers/resumed/exec", json={"cmd": ["true"]}, headers=h)
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    fleet.operations.finish(busy.op_id)


def test_a_restart_during_a_suspend_ends_suspended_and_its_next_use_wakes_it(
    server: Server, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = str(create(server, name="z", idle_timeout=60)["id"])
    saved = Gate()

    async def pause(self: HostRuntime, machine: Machine, *_args: Any) -> Any:
        await machine.vm.kill()
        plant_saved_state(server, cid)  # its memory saved; the server ends before it says so
        saved.entered.set()
        await saved.open.wait()

    monkeypatch.setattr(HostRuntime, "pause", pause)
    computers = server.client.app.state.computers  # type: ignore[attr-defined]

    async def begin() -> None:
        computers.fleet.spawn(computers.suspend(cid, 0.0))
        await saved.entered.wait()

    call(server.client, begin)
    assert state_of(server, "z") == "pausing"
    again = restart(server, short_tmp)
    try:
        assert state_of(again, "z") == "suspended"
        ran = again.client.post(
            "/v1/computers/z/exec", json={"cmd": ["true"]}, headers=again.headers()
        )
        assert ran.status_code == 200 and ran.json()["exit_code"] == 0, ran.text
    finally:
        again.client.__exit__(None, None, None)


def test_a_restart_during_a_wake_leaves_it_suspended(
    server: Server, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = suspend(server, monkeypatch, "y", saved=True)
    gate = Gate()
    monkeypatch.setattr(HostRuntime, "resume", gate.around(HostRuntime.resume))
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    org = org_of(server, cid)

    async def begin() -> None:
        computers.fleet.spawn(computers.exec(org, cid, ["true"], max_output=100))
        await gate.entered.wait()

    call(server.client, begin)
    assert state_of(server, "y") == "resuming"
    monkeypatch.undo()  # the restarted server resumes as the host does
    again = restart(server, short_tmp)
    try:
        assert state_of(again, "y") == "suspended"
    finally:
        again.client.__exit__(None, None, None)


def test_a_restart_during_a_pause_still_ends_paused(
    server: Server, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = str(create(server, name="p")["id"])
    pid = int((server.data_dir.computer(cid).run / "vm.pid").read_text())
    plant_saved_state(server, cid)
    os.kill(pid, signal.SIGKILL)
    # rest_state unset, as a pause before 0033 left it; made while no server runs, as a crash
    # leaves it (a running server's watcher would settle it first)
    again = restart(server, short_tmp, lambda: as_the_crash_left(server, cid, "pausing"))
    try:
        assert state_of(again, "p") == "paused"
    finally:
        again.client.__exit__(None, None, None)


def test_a_pause_that_ends_the_lifetime_interrupted_while_its_vm_ran_on_keeps_the_lifetime(
    server: Server, short_tmp: Path
) -> None:
    # E2B's pause marks the record as it begins (its lifetime ends with it); a restart that finds
    # the VM still running runs it on: its lifetime runs on too, the mark gone (it was kept, and
    # the computer's later idle suspension read as E2B's `paused`, its wake as a fresh lifetime)
    cid = str(create(server, name="q", lifetime=3600)["id"])

    def left() -> None:
        as_the_crash_left(server, cid, "pausing")
        with server.client.app.state.db.session() as s:  # type: ignore[attr-defined]
            row = s.get(ComputerRow, cid)
            assert row is not None
            row.pause_ended_lifetime = True

    again = restart(server, short_tmp, left)
    try:
        assert state_of(again, "q") == "running"
        with again.client.app.state.db.session() as s:  # type: ignore[attr-defined]
            row = s.get(ComputerRow, cid)
            assert row is not None and (row.lifetime, row.pause_ended_lifetime) == (3600, False)
    finally:
        again.client.__exit__(None, None, None)


def test_an_e2b_connect_stream_whose_client_leaves_during_a_wake_leaves_it_running(
    e2b: E2bStand, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, envd = e2b.create(timeout=900, autoPause=True, autoResume={"enabled": True})
    r = e2b.client.post("/e2b-envd/filesystem.Filesystem/Stat", json={"path": "/"}, headers=envd)
    assert r.status_code == 200, r.text
    cid = sandbox.replace("-", "_", 1)
    computers = e2b.client.app.state.computers  # type: ignore[attr-defined]
    with e2b.client.app.state.db.session() as s:  # type: ignore[attr-defined]
        row = s.get(ComputerRow, cid)
        assert row is not None
        org = s.get(Org, row.org_id)

    async def pause(self: HostRuntime, machine: Machine, *_args: Any) -> Any:
        await machine.vm.kill()  # the stand-in keeps no memory: its wake boots afresh
        return SimpleNamespace(size=0, seconds=0.0)

    monkeypatch.setattr(HostRuntime, "pause", pause)
    assert call(e2b.client, computers.pause, org, cid, True).state == "suspended"
    gate = Gate()
    monkeypatch.setattr(HostRuntime, "resume", gate.around(HostRuntime.resume))
    body = envelope({"process": {"pid": 4242}})
    headers = [
        (b"host", b"testserver"),
        (b"content-type", b"application/connect+json"),
        (b"content-length", str(len(body)).encode()),
        *[(k.lower().encode(), v.encode()) for k, v in envd.items()],
    ]
    path = "/e2b-envd/process.Process/Connect"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }

    async def scenario() -> None:
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gate.entered.wait()  # the wake has begun: the SDK's client gives up now
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            return None

        await asyncio.wait_for(e2b.client.app(scope, receive, send), 10)
        gate.open.set()

    call(e2b.client, scenario)
    deadline = time.monotonic() + 15
    while (now := e2b.client.get(f"/v1/computers/{cid}", headers=e2b.v1).json()["state"]) in (
        "suspended",
        "resuming",
    ):
        assert time.monotonic() < deadline, f"never woken: still {now}"
        time.sleep(0.05)
    assert now == "running"
    r = e2b.client.post("/e2b-envd/filesystem.Filesystem/Stat", json={"path": "/"}, headers=envd)
    assert r.status_code == 200, r.text
