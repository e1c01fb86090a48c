"""What a restart makes of what a crash left: a copy (from a snapshot, a fork) recorded before it
had its own identity is given one or removed, never adopted with its source's; a running
computer whose VM the host left frozen (a fork's memory save) runs on, never killed; so does one
whose pause the server did not finish, and memory it saved is dropped, with what the unfinished
save left. The crash
itself is the vm tier's (tests/vm/test_crash_recovery.py kills a real server at each step); here
the records and the 'VM' are put in the state it leaves, and a real restart reconciles them."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from sanbox.store.models import ComputerRow

from .conftest import Server, start_server
from .test_api_computers import create
from .test_honest_outcomes import plant_saved_state

pytestmark = pytest.mark.component


def machine_id(server: Server, computer_id: str) -> bytes:
    """The machine-id a local 'VM''s agent wrote (its own root, under its run dir)."""
    return (server.data_dir.computer(computer_id).run / "root/etc/machine-id").read_bytes()


def as_the_crash_left(
    server: Server, computer_id: str, state: str, pending: str | None = None
) -> None:
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        row = s.get(ComputerRow, computer_id)
        assert row is not None
        row.state, row.identity_pending = state, pending


def restart(server: Server, short_tmp: Path, meanwhile: Callable[[], None] | None = None) -> Server:
    """The server stopped (its 'VMs' run on) and started again; `meanwhile` runs between, as
    what a crash left is made while no server runs (its watcher cannot settle it first)."""
    server.client.__exit__(None, None, None)
    if meanwhile is not None:
        meanwhile()
    client, settings, dd = start_server(short_tmp)
    client.__enter__()
    return Server(client, server.key, dd, settings)


def test_a_copy_stopped_before_its_identity_gets_one_at_restart(
    server: Server, short_tmp: Path
) -> None:
    h = server.headers()
    create(server, name="src")
    create(server, name="plain")
    assert server.client.post("/v1/computers/src/stop", headers=h).status_code == 200
    assert (
        server.client.post("/v1/computers/src/snapshots", json={"name": "s"}, headers=h).status_code
        == 201
    )
    copy = create(server, name="copy", from_snapshot="s")
    # the restore ran, the identity did not: it still names itself as its source does
    theirs = b"5a" * 16 + b"\n"  # its source's machine-id, copied with its disk
    (server.data_dir.computer(str(copy["id"])).run / "root/etc/machine-id").write_bytes(theirs)
    as_the_crash_left(server, str(copy["id"]), "creating", "copy")

    again = restart(server, short_tmp)
    try:
        got = again.client.get("/v1/computers/copy", headers=h).json()
        assert got["state"] == "running"
        assert machine_id(again, str(copy["id"])) != theirs
        events = again.client.get("/v1/computers/copy/events", headers=h).json()["events"]
        assert any(e["type"] == "computer.identity" for e in events)
        r = again.client.post("/v1/computers/copy/exec", json={"cmd": ["true"]}, headers=h)
        assert r.status_code == 200 and r.json()["exit_code"] == 0
        # a create that was not a copy is adopted as it is, as before
        assert again.client.get("/v1/computers/plain", headers=h).json()["state"] == "running"
    finally:
        again.client.__exit__(None, None, None)


def test_a_fork_interrupted_by_a_crash_is_removed_whole(server: Server, short_tmp: Path) -> None:
    h = server.headers()
    create(server, name="src")
    assert server.client.post("/v1/computers/src/stop", headers=h).status_code == 200
    r = server.client.post("/v1/computers/src/fork", json={"count": 1, "name": "child"}, headers=h)
    assert r.status_code == 201, r.text
    child = r.json()["computers"][0]
    as_the_crash_left(server, child["id"], "creating", "fork")

    again = restart(server, short_tmp)
    try:
        assert child["id"] in again.client.app.state.reconcile_report.removed  # type: ignore[attr-defined]
        r = again.client.get("/v1/computers/child", headers=h)
        assert r.status_code == 404
        assert child["id"] not in set(again.data_dir.computer_ids())
        assert again.client.get("/v1/computers/src", headers=h).json()["state"] == "stopped"
    finally:
        again.client.__exit__(None, None, None)


def test_a_source_left_frozen_by_a_fork_runs_on_after_restart(
    server: Server, short_tmp: Path
) -> None:
    h = server.headers()
    src = create(server, name="src")
    pid = int((server.data_dir.computer(str(src["id"])).run / "vm.pid").read_text())
    os.kill(pid, signal.SIGSTOP)  # its vCPUs stopped for a memory save the server never ended

    again = restart(server, short_tmp)
    try:
        report = again.client.app.state.reconcile_report  # type: ignore[attr-defined]
        assert report.continued == [src["id"]] and src["id"] in report.reattached
        got = again.client.get("/v1/computers/src", headers=h).json()
        assert got["state"] == "running"
        r = again.client.post("/v1/computers/src/exec", json={"cmd": ["echo", "on"]}, headers=h)
        assert r.status_code == 200 and r.json()["stdout"] == "on\n", r.text
        events = again.client.get("/v1/computers/src/events", headers=h).json()["events"]
        assert any(e["type"] == "computer.continued" for e in events)
    finally:
        os.kill(pid, signal.SIGCONT)  # whatever happened, the test leaves no stopped process
        again.client.__exit__(None, None, None)


def test_a_pause_committed_but_not_finished_runs_on_without_its_saved_memory(
    server: Server, short_tmp: Path
) -> None:
    h = server.headers()
    made = create(server, name="halfway")
    cid = str(made["id"])
    pid = int((server.data_dir.computer(cid).run / "vm.pid").read_text())
    plant_saved_state(server, cid)  # its state committed, its vCPUs stopped, its VM not ended
    os.kill(pid, signal.SIGSTOP)
    as_the_crash_left(server, cid, "pausing")

    again = restart(server, short_tmp)
    try:
        assert again.client.get("/v1/computers/halfway", headers=h).json()["state"] == "running"
        runtime = again.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
        assert not runtime.has_saved_memory(cid), "memory its disk will move past is kept"
        r = again.client.post("/v1/computers/halfway/exec", json={"cmd": ["true"]}, headers=h)
        assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    finally:
        os.kill(pid, signal.SIGCONT)
        again.client.__exit__(None, None, None)


def test_a_pause_the_server_did_not_finish_leaves_no_temporary_files(
    server: Server, short_tmp: Path
) -> None:
    h = server.headers()
    left: dict[str, list[Path]] = {}
    for name in ("lives", "died"):
        cdir = server.data_dir.computer(str(create(server, name=name)["id"]))
        cdir.state.mkdir(parents=True, exist_ok=True)
        left[name] = [cdir.state / n for n in ("memory.tmp", "vmstate.tmp", "vmstate.devices.tmp")]
        for tmp in left[name]:
            tmp.write_bytes(b"half a save")
        as_the_crash_left(server, cdir.root.name, "pausing")
        if name == "died":
            os.kill(int((cdir.run / "vm.pid").read_text()), signal.SIGKILL)

    again = restart(server, short_tmp)
    try:
        assert again.client.get("/v1/computers/lives", headers=h).json()["state"] == "running"
        assert again.client.get("/v1/computers/died", headers=h).json()["state"] == "stopped"
        for name, tmps in left.items():
            assert [t.name for t in tmps if t.exists()] == [], name
    finally:
        again.client.__exit__(None, None, None)
