"""What a pause or a snapshot writes to the data filesystem is admitted before it is written, as a
new disk is: a pause's saved memory (up to the guest's RAM), a snapshot's new overlay (promised
the disk's full size again; the old one, frozen as a layer, no longer counted) and its memory, a
fork's snapshot besides its children. No room is 507 `insufficient_storage`, the computer left as
it was and nothing made; what is admitted is held while it is written, then released. An idle
suspension refused so leaves the computer running and says so once. The data filesystem's free
space is set by the test (`space._free`); its files are the real ones the local driver made."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sanbox.control import idle
from sanbox.control.capacity import Capacity
from sanbox.host.data import space
from sanbox.host.runtime import HostRuntime
from sanbox.store import repo

from .conftest import Server
from .test_api_computers import create, error
from .test_honest_outcomes import saves_as_a_hypervisor

pytestmark = pytest.mark.component

MIB = 1024**2
GIB = 1024**3


@pytest.fixture
def data_free(server: Server, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Sets the bytes the data filesystem has free (the RAM dir keeps its own)."""
    real, root = space._free, server.data_dir.root
    free = {"bytes": 1 << 50}
    monkeypatch.setattr(space, "_free", lambda p: free["bytes"] if p == root else real(p))

    def set_free(n: int) -> None:
        free["bytes"] = n

    return set_free


def capacity(server: Server) -> Capacity:
    cap: Capacity = server.client.app.state.computers.fleet.capacity  # type: ignore[attr-defined]
    return cap


def events(server: Server, name: str) -> list[dict[str, Any]]:
    h = server.headers()
    listed: list[dict[str, Any]] = server.client.get(
        f"/v1/computers/{name}/events", headers=h
    ).json()["events"]
    return listed


def state(server: Server, name: str) -> str:
    got = server.client.get(f"/v1/computers/{name}", headers=server.headers()).json()
    return str(got["state"])


def disk_size(made: dict[str, object]) -> int:
    gib = made["disk_gib"]
    assert isinstance(gib, int)
    return gib * GIB


def files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_a_pause_whose_memory_would_not_fit_is_refused_and_it_runs_on(
    server: Server, data_free: Callable[[int], None]
) -> None:
    h = server.headers()
    made = create(server, name="full", memory_mib=256)
    cdir = server.data_dir.computer(str(made["id"]))
    data_free(255 * MIB)  # the guest's 256 MiB of RAM would not fit once written
    r = server.client.post("/v1/computers/full/pause", headers=h)
    assert error(r) == (507, "insufficient_storage"), r.text
    message = r.json()["error"]["message"]
    assert "256 MiB of saved memory does not fit on the data filesystem" in message
    assert "still running as it was" in message
    assert state(server, "full") == "running"
    assert not any(e["type"] == "computer.pausing" for e in events(server, "full"))
    assert files(cdir.state) == []  # nothing written
    ran = server.client.post("/v1/computers/full/exec", json={"cmd": ["echo", "on"]}, headers=h)
    assert ran.status_code == 200 and ran.json()["stdout"] == "on\n"
    assert capacity(server).ledger.totals() == (0, 0, 0)


def test_a_pause_holds_room_for_its_memory_while_it_writes_it(
    server: Server, data_free: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    h = server.headers()
    made = create(server, name="fits", memory_mib=256)
    data_free(256 * MIB + disk_size(made))  # room for it beside its own disk's promise
    held: list[tuple[int, int, int]] = []
    real = HostRuntime.pause

    async def pause(rt: HostRuntime, *args: Any) -> Any:
        held.append(capacity(server).ledger.totals())
        return await real(rt, *args)

    monkeypatch.setattr(HostRuntime, "pause", pause)
    r = server.client.post("/v1/computers/fits/pause", headers=h)  # the local VM cannot save
    assert error(r) == (500, "pause_failed"), r.text
    assert held == [(0, 0, 256 * MIB)]
    assert capacity(server).ledger.totals() == (0, 0, 0)  # released after a failure
    saves_as_a_hypervisor(monkeypatch)
    r = server.client.post("/v1/computers/fits/pause", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "paused", r.text
    assert held[-1] == (0, 0, 256 * MIB)
    assert capacity(server).ledger.totals() == (0, 0, 0)  # and after a success


def test_a_snapshot_whose_new_overlay_would_not_fit_is_refused(
    server: Server, data_free: Callable[[int], None]
) -> None:
    """Its disk is frozen as a layer and it goes on on a new overlay that may fill its disk's
    whole size again: 1 MiB less than that free is not room, whatever its old disk holds."""
    h = server.headers()
    made = create(server, name="snapped")
    size = disk_size(made)
    assert server.client.post("/v1/computers/snapped/stop", headers=h).status_code == 200
    cdir = server.data_dir.computer(str(made["id"]))
    before = files(cdir.root)
    data_free(size - MIB)
    r = server.client.post("/v1/computers/snapped/snapshots", json={}, headers=h)
    assert error(r) == (507, "insufficient_storage"), r.text
    message = r.json()["error"]["message"]
    assert f"a {size // MIB} MiB disk does not fit on the data filesystem" in message
    assert message.endswith("no snapshot was taken; the computer is stopped, as it was")
    assert server.client.get("/v1/snapshots", headers=h).json()["snapshots"] == []
    assert files(server.data_dir.root / "snapshots") == []
    assert files(cdir.root) == before and state(server, "snapped") == "stopped"
    data_free(size)
    r = server.client.post("/v1/computers/snapped/snapshots", json={}, headers=h)
    assert r.status_code == 201, r.text  # its own disk's promise is not counted: room
    assert capacity(server).ledger.totals() == (0, 0, 0)


def test_a_snapshot_with_memory_needs_room_for_its_memory_too(
    server: Server, data_free: Callable[[int], None]
) -> None:
    h = server.headers()
    made = create(server, name="remembered", memory_mib=256)
    size = disk_size(made)
    data_free(size + 255 * MIB)
    r = server.client.post("/v1/computers/remembered/snapshots", json={"memory": True}, headers=h)
    assert error(r) == (507, "insufficient_storage"), r.text
    message = r.json()["error"]["message"]
    assert f"a {size // MIB} MiB disk and 256 MiB of saved memory do not fit" in message
    assert "still running as it was" in message
    assert server.client.get("/v1/snapshots", headers=h).json()["snapshots"] == []
    assert capacity(server).ledger.totals() == (0, 0, 0)


def test_a_snapshot_holds_its_room_while_it_is_taken(
    server: Server, data_free: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    h = server.headers()
    made = create(server, name="held")
    size = disk_size(made)
    assert server.client.post("/v1/computers/held/stop", headers=h).status_code == 200
    held: list[tuple[int, int, int]] = []
    real = HostRuntime.snapshot

    async def snapshot(rt: HostRuntime, *args: Any, **kwargs: Any) -> Any:
        held.append(capacity(server).ledger.totals())
        return await real(rt, *args, **kwargs)

    monkeypatch.setattr(HostRuntime, "snapshot", snapshot)
    r = server.client.post("/v1/computers/held/snapshots", json={}, headers=h)
    assert r.status_code == 201, r.text
    assert held == [(0, size, 0)]
    assert capacity(server).ledger.totals() == (0, 0, 0)


def test_a_fork_holds_room_for_its_snapshot_besides_its_children(
    server: Server, data_free: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two children's RAM and disks, and the source's new overlay (a stopped source: no
    memory); none of it once the fork ended."""
    h = server.headers()
    made = create(server, name="src", memory_mib=256)
    size = disk_size(made)
    assert server.client.post("/v1/computers/src/stop", headers=h).status_code == 200
    held: list[tuple[int, int, int]] = []
    real = HostRuntime.fork

    async def fork(rt: HostRuntime, *args: Any, **kwargs: Any) -> Any:
        held.append(capacity(server).ledger.totals())
        return await real(rt, *args, **kwargs)

    monkeypatch.setattr(HostRuntime, "fork", fork)
    promised = space.disk_room(server.data_dir).promised  # the source's disk, as it may grow
    assert 0 < promised < size  # (it holds a little already)
    data_free(2 * size + promised)  # room for the children, not for the source's new overlay
    r = server.client.post("/v1/computers/src/fork", json={"count": 2}, headers=h)
    assert error(r) == (507, "insufficient_storage"), r.text
    assert "no fork was made; the computer is stopped, as it was" in r.json()["error"]["message"]
    assert held == [] and capacity(server).ledger.totals() == (0, 0, 0)
    data_free(3 * size)
    r = server.client.post("/v1/computers/src/fork", json={"count": 2}, headers=h)
    assert r.status_code == 201, r.text
    assert held == [(2 * 256 * MIB, 3 * size, 0)]
    assert capacity(server).ledger.totals() == (0, 0, 0)


def test_an_idle_suspension_refused_for_room_says_so_once_and_runs_on(
    server: Server, data_free: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's own idle watcher (every 0.2 s) finds it idle; no room for its memory: it
    runs on, one event says why, and the watcher tries again later without saying it again."""
    made = create(server, name="idler", memory_mib=256, idle_timeout=60)
    data_free(255 * MIB)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    tried: list[str] = []
    real = Capacity.admit_pause

    def admit_pause(cap: Capacity, host: Any, memory_mib: int) -> Any:
        tried.append(str(made["id"]))
        return real(cap, host, memory_mib)

    monkeypatch.setattr(Capacity, "admit_pause", admit_pause)
    monkeypatch.setattr(idle, "REFUSED_AGAIN_AFTER", 0.5)
    with fleet.db.session() as s:  # used long ago, here and as its record says
        repo.set_last_active(s, str(made["id"]), datetime(2026, 1, 1, tzinfo=UTC))
    monkeypatch.setattr(fleet, "idle_for", lambda _cid: 3600.0)
    deadline = time.monotonic() + 30
    while len(tried) < 3 and time.monotonic() < deadline:  # tried again, and again
        time.sleep(0.1)
    assert len(tried) >= 3, tried
    refused = [e for e in events(server, "idler") if e["type"] == "computer.suspend_refused"]
    assert len(refused) == 1, refused
    assert "not suspended" in refused[0]["message"]
    assert "saved memory does not fit on the data filesystem" in refused[0]["message"]
    assert not any(e["type"] == "computer.pausing" for e in events(server, "idler"))
    assert state(server, "idler") == "running"
