"""Two fleet hosts (real host agents over mutual TLS, on the local driver) and what keeps a
computer on the right one:
- a host checks its own room before it makes a computer: one whose last report showed room it no
  longer has refuses (`host_full`), and the create is placed again on another host of the region,
  its events saying so;
- a host that comes back is told the set it should run: a computer whose record went while the
  host was forgotten as dead has its VM stopped and its folder set aside, disks kept; one whose
  record says it is stopped (a stop whose answer was lost) has its VM stopped, its disk kept; a
  snapshot whose record went is deleted; and nothing it should run or keep is touched; so is one
  whose agent never restarted (lost and back, forgotten and joined again while it serves), and
  the first copy of a snapshot moved away goes, while one a move to it holds stays;
- placement counts the room an overcommitting host's admission gives, above its watermark."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from sanbox import Sanbox
from sanbox.control.hosts import capacity_of
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.fleet.link.room import HostRoom
from sanbox.fleet.operations import Operations
from sanbox.host.data.layout import DataDir
from sanbox.host.door import GIB, HostFullError
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.store import Database
from sanbox.store.db import sqlite_url
from sanbox.store.fleet_models import HostRow
from sanbox.store.models import ComputerRow, SnapshotRow

from .conftest import LiveServer, fake_image
from .test_host_link import (
    _free_port,
    _hosts,
    _sanbox,
    _serving,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.component


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=4.0)


class _Behind(HostAgent):
    """A host whose report is a moment old: it still shows the room (many CPUs, a large disk)
    that other work has since taken. Its admission reads the filesystem as it is."""

    def report(self) -> dict[str, Any]:
        found = super().report()
        found["cpus"] = 64
        found["room"]["disk"] = {"free": 1 << 42, "promised": 0, "path": "/"}
        return found


def _runtime(host_dir: Path, ram_dir: Path | None = None) -> HostRuntime:
    dd = DataDir(host_dir, ram_dir) if ram_dir is not None else DataDir(host_dir)
    return HostRuntime(dd, LocalDriver(), networking=False)


def _up(live: LiveServer, *names: str) -> bool:
    up = {h.name for h in _hosts(live) if h.state == "up" and h.layers}
    return set(names) <= up


def test_a_host_without_room_sends_the_create_to_another(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    free = os.statvfs(short_tmp).f_bavail * os.statvfs(short_tmp).f_frsize
    disk_gib = free // GIB + 8  # more than the data filesystem has: fits only thinly overcommitted
    behind_dir, roomy_dir = short_tmp / "h1", short_tmp / "h2"
    ports = _free_port(), _free_port()
    join_host(live, behind_dir, ports[0], "h1")
    join_host(live, roomy_dir, ports[1], "h2")
    for d in (behind_dir, roomy_dir):
        fake_image(DataDir(d))
    behind = _Behind(_runtime(behind_dir))  # its admission: no overcommit
    roomy_rt = _runtime(roomy_dir, short_tmp / "h2-ram")
    (short_tmp / "h2-ram").mkdir()
    roomy = HostAgent(roomy_rt, room=HostRoom(roomy_rt, disk_overcommit=4.0))
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    with (
        _serving(behind, ports[0], host_identity(DataDir(behind_dir).host / "fleet")),
        _serving(roomy, ports[1], host_identity(DataDir(roomy_dir).host / "fleet")),
    ):
        for port in ports:
            _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("both hosts up with their builds", lambda: _up(live, "h1", "h2"))
        with Sanbox(live.url, live.key, timeout=60) as client:
            c = client.computers.create(name="big", disk_gib=disk_gib, idle_timeout=0)
            assert c.state == "running"
            events = [(e.type, e.data) for e in c.events()]
            placed = [d["host"] for t, d in events if t == "computer.placed"]
            refused = [d["host"] for t, d in events if t == "computer.refused"]
            assert placed == ["h1", "h2"] and refused == ["h1"], events
            assert (roomy_dir / "computers" / c.id).is_dir()
            assert not (behind_dir / "computers" / c.id).exists(), "h1 made part of it"
            assert c.exec("true").exit_code == 0
            c.delete()


def _recorded_stopped(live: LiveServer, computer_id: str) -> None:
    db = Database(sqlite_url(live.data_dir.root / "sanbox.db"))
    try:
        with db.engine.begin() as conn:
            conn.execute(
                update(ComputerRow).where(ComputerRow.id == computer_id).values(state="stopped")
            )
    finally:
        db.close()


def _forget_snapshot(live: LiveServer, snapshot_id: str) -> None:
    db = Database(sqlite_url(live.data_dir.root / "sanbox.db"))
    try:
        with db.engine.begin() as conn:
            conn.execute(delete(SnapshotRow).where(SnapshotRow.id == snapshot_id))
    finally:
        db.close()


def _processes_naming(text: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(pid))
    return found


def test_a_host_that_comes_back_is_told_the_set_it_should_run(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    host_dir, port = short_tmp / "h1", _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    me = host_identity(DataDir(host_dir).host / "fleet")
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    with Sanbox(live.url, live.key, timeout=60) as client:
        with _serving(HostAgent(_runtime(host_dir)), port, me):
            _wait_until_up(f"https://127.0.0.1:{port}", control)
            _until("h1 up with its builds", lambda: _up(live, "h1"))
            keep = client.computers.create(name="keep", idle_timeout=0)
            gone = client.computers.create(name="gone", idle_timeout=0)
            rested = client.computers.create(name="rested", idle_timeout=0)
            keep.files.write("/tmp/kept.txt", b"still here")
            assert _processes_naming(gone.id), "its VM runs"
            snapped = client.computers.create(name="snapped", idle_timeout=0)
            snapped.stop()  # the stand-in snapshots a computer at rest only
            kept_snap = snapped.snapshot(name="kept-snap")
            lost_snap = snapped.snapshot(name="lost-snap")
        # the host agent goes (its VMs run on), is declared lost, and forgotten as dead; the
        # computer deleted meanwhile loses its record only: nothing on the host is reachable
        _until("h1 lost", lambda: _hosts(live)[0].state == "lost")
        forgot = _sanbox(live, "host", "forget", "h1", "--confirm-dead")
        assert forgot.returncode == 0, forgot.stderr
        gone.delete()
        _recorded_stopped(live, rested.id)  # a stop whose answer was lost with the host
        _forget_snapshot(live, lost_snap.id)  # deleted while its host was away
        assert sorted(c.name for c in client.computers.list()) == ["keep", "rested", "snapped"]
        assert (host_dir / "computers" / gone.id).is_dir()

        # the host joins again: told its set, it stops and sets aside the one it no longer runs
        join_host(live, host_dir, port)
        with _serving(HostAgent(_runtime(host_dir)), port, me):
            _wait_until_up(f"https://127.0.0.1:{port}", control)
            _until("gone set aside", lambda: not (host_dir / "computers" / gone.id).exists())
            aside = list((host_dir / "quarantine").iterdir())
            assert [p.name.startswith(f"{gone.id}-") for p in aside] == [True], aside
            assert (aside[0] / "disk").exists() or any(aside[0].iterdir()), "its files kept"
            assert (host_dir / "quarantine").stat().st_mode & 0o777 == 0o700
            _until("its VM stopped", lambda: not _processes_naming(gone.id))
            # one recorded at rest whose VM still ran: its VM stopped, its folder and disk kept
            _until("the rested one's VM stopped", lambda: not _processes_naming(rested.id))
            assert (host_dir / "computers" / rested.id).is_dir()
            assert rested.refresh().state == "stopped"
            rested.start()
            assert rested.exec("true").exit_code == 0
            rested.delete()
            # a snapshot without a record is deleted; the recorded one is untouched
            snapshots = host_dir / "snapshots"
            _until(
                "the unrecorded snapshot deleted", lambda: not (snapshots / lost_snap.id).exists()
            )
            assert (snapshots / kept_snap.id).is_dir()
            client.snapshots.delete(kept_snap.id)
            snapped.delete()
            # the one it should run is untouched and answers
            assert (host_dir / "computers" / keep.id).is_dir()
            _until("keep back", lambda: keep.refresh().state == "running", timeout=30)
            assert keep.exec("cat /tmp/kept.txt && rm /tmp/kept.txt").stdout == "still here"
            keep.delete()


def test_placement_counts_the_room_an_overcommitting_host_admits(short_tmp: Path) -> None:
    """The host's report carries its low watermark, so the room placement reads of it is the room
    its own admission gives: a disk a little smaller is admitted there, one a little larger refused
    (the margin: what other writers may change of the filesystem meanwhile)."""
    rt = _runtime(short_tmp / "h", short_tmp / "h-ram")
    (short_tmp / "h-ram").mkdir()
    fake_image(rt.data_dir)
    room = HostRoom(rt, disk_overcommit=4.0, disk_low_watermark=20.0)
    report = HostAgent(rt, room=room).report()
    assert report["disk_kept_free"] == room.capacity.kept_free(rt.data_dir.root) > 0
    placeable = capacity_of(report).disk_bytes
    margin = 16  # GiB of disk: 4 GiB of the filesystem at 4x
    with room.held(128, placeable // GIB - margin):
        pass
    with pytest.raises(HostFullError), room.held(128, placeable // GIB + margin):
        pass
    without = HostRoom(rt, disk_overcommit=4.0, disk_low_watermark=0.0)
    more = capacity_of(HostAgent(rt, room=without).report()).disk_bytes - placeable
    assert more > 4 * report["disk_kept_free"] - margin * GIB  # its watermark, 4x


class _Muted(HostAgent):
    """A host agent whose reports are refused while `muted` (a partition, as the control plane
    sees it): the same process, so the same epoch, throughout."""

    muted = False

    def report(self) -> dict[str, Any]:
        if self.muted:
            raise RuntimeError("muted")
        return super().report()


def _moved_to(live: LiveServer, snapshot_id: str, host: str, moving: bool) -> str | None:
    """The snapshot's record names `host` (the first copy of a move to it left behind, or the
    source of a move from it under way: `moving`, its operation begun); that operation's id."""
    db = Database(sqlite_url(live.data_dir.root / "sanbox.db"))
    try:
        with db.engine.begin() as conn:
            host_id = conn.execute(select(HostRow.id).where(HostRow.name == host)).scalar_one()
            conn.execute(
                update(SnapshotRow).where(SnapshotRow.id == snapshot_id).values(host_id=host_id)
            )
        return (
            Operations(db).begin(snapshot_id, "move", host_id, "elsewhere").op_id
            if moving
            else None
        )
    finally:
        db.close()


def _finish(live: LiveServer, op_id: str) -> None:
    db = Database(sqlite_url(live.data_dir.root / "sanbox.db"))
    try:
        Operations(db).finish(op_id)
    finally:
        db.close()


def test_a_host_that_comes_back_without_restarting_is_told_its_set(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    """Its agent never restarts (one epoch of its own): lost and answering again, then forgotten
    and joined again while it serves, it is told its set each time. Before, only a new agent
    epoch did that: a VM of a computer recorded at rest, or deleted, ran on for good."""
    live = fleet_server
    host_dir, port = short_tmp / "h1", _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    me = host_identity(DataDir(host_dir).host / "fleet")
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    agent = _Muted(_runtime(host_dir))
    snapshots = host_dir / "snapshots"
    with Sanbox(live.url, live.key, timeout=60) as client, _serving(agent, port, me):
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up with its builds", lambda: _up(live, "h1"))
        rested = client.computers.create(name="rested", idle_timeout=0)
        gone = client.computers.create(name="gone", idle_timeout=0)
        snapped = client.computers.create(name="snapped", idle_timeout=0)
        snapped.stop()
        # settled in id order: the one a move to h1 holds is looked at before the other
        held, away = sorted(snapped.snapshot(name=n).id for n in ("one", "two"))
        join_host(live, short_tmp / "h2", _free_port(), "h2")  # never served
        client.fleet.drain("h2")

        # lost and back, its agent the same: the records changed meanwhile are what it runs
        agent.muted = True
        _until("h1 lost", lambda: _hosts_named(live)["h1"].state == "lost")
        _recorded_stopped(live, rested.id)  # a stop whose answer was lost with the host
        moving = _moved_to(live, held, "h2", moving=True)  # a move to h1 under way
        _moved_to(live, away, "h2", moving=False)  # a move from h1 whose delete did not reach it
        agent.muted = False
        _until("the rested one's VM stopped", lambda: not _processes_naming(rested.id))
        _until("the moved snapshot's first copy deleted", lambda: not (snapshots / away).exists())
        assert (snapshots / held).is_dir(), "a snapshot a move to this host holds was deleted"
        assert (host_dir / "computers" / rested.id).is_dir()
        assert _processes_naming(gone.id), "a computer it should run was touched"

        # forgotten, its computer deleted meanwhile, joined again while it serves
        agent.muted = True
        _until("h1 lost again", lambda: _hosts_named(live)["h1"].state == "lost")
        forgot = _sanbox(live, "host", "forget", "h1", "--confirm-dead")
        assert forgot.returncode == 0, forgot.stderr
        gone.delete()
        join_host(live, host_dir, port)
        agent.muted = False
        _until("gone set aside", lambda: not (host_dir / "computers" / gone.id).exists())
        _until("its VM stopped", lambda: not _processes_naming(gone.id))
        assert (snapshots / held).is_dir()
        assert moving is not None
        _finish(live, moving)
        rested.delete()
        snapped.delete()


def _hosts_named(live: LiveServer) -> dict[str, Any]:
    return {h.name: h for h in _hosts(live)}
