"""What a move brings in is admitted by the host that takes it (`HostRoom.carried`), before it
writes: its files whole (they are written at once), a disk's growth past its file as a thin
disk's promise; refused, the answer names that host and what to do. Two fleet hosts of a region
and real host agents over mutual TLS on the local driver (tests/component/test_fleet_move.py's
fleet), the taking host's free space set or held."""

from __future__ import annotations

import pytest

from sanbox import Sanbox
from sanbox.fleet.link.room import HostRoom
from sanbox.sdk.errors import SanboxError
from sanbox.sdk.fleet import FleetHost

from .conftest import LiveServer
from .test_fleet_move import (
    Fleet,
    _disk,
    _on,
    _qemu_io,
    _snapshots_on,
    fleet,
    fleet_server,
    made_on_h1,
)
from .test_host_link import _hosts, _sanbox, _until

pytestmark = pytest.mark.component

__all__ = ["fleet", "fleet_server"]  # the fixtures, used by name
MIB = 1024 * 1024


def test_a_move_is_admitted_whole_for_what_it_writes_at_once(fleet: Fleet) -> None:
    """On a host that lets thin disks add up to 64x its free space, what an import writes at
    once is counted whole: a snapshot's files (32 MiB written into its disk) do not fit in 20
    MiB, though at 1/64 they did; a disk's file does not fit in 40 MiB beside the rest of its
    1 GiB (its growth, 16 MiB at 1/64), though the whole disk at 1/64 did. Refused, each stays
    where it was and nothing of it is on h2; with room for it, each moves."""
    live, dirs, h2 = fleet.live, fleet.dirs, fleet.h2
    h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "written")
        wrote = _qemu_io(_disk(dirs["h1"], c.id), "write -P 0x6b 0 32M")
        assert wrote.returncode == 0, wrote.stderr
        snap = c.snapshot(name="written")

        h2.free = 20 * MIB
        fleet.h2_agent.room = HostRoom(h2, disk_overcommit=64.0, disk_low_watermark=0.0)
        reported = 20 * MIB * 64  # what placement may reserve there: its thin disks' room
        _until("h2 reports its overcommit", lambda: _host(live, "h2").disk_bytes == reported)
        refused = _sanbox(live, "snapshot", "move", "written", "--to", "h2")
        assert refused.returncode != 0, "32 MiB of files admitted in 20 MiB"
        assert _snapshots_on(dirs, snap.id) == ["h1"]
        h2.free = 40 * MIB
        moved = _sanbox(live, "snapshot", "move", "written", "--to", "h2")
        assert moved.returncode == 0, moved.stderr
        assert _snapshots_on(dirs, snap.id) == ["h2"]

        refused = _sanbox(live, "move", "written", "--to", "h2")
        assert refused.returncode != 0, "a 32 MiB file and its disk's growth admitted in 40 MiB"
        assert _on(dirs, c.id) == ["h1"] and c.refresh().state == "stopped"
        assert fleet.h2_agent.room.capacity.ledger.totals() == (0, 0, 0)
        h2.free = 64 * MIB
        moved = _sanbox(live, "move", "written", "--to", "h2")
        assert moved.returncode == 0, moved.stderr
        assert _on(dirs, c.id) == ["h2"]
        client.snapshots.delete(snap.id)
        c.delete()


def _host(live: LiveServer, name: str) -> FleetHost:
    return next(h for h in _hosts(live) if h.name == name)


def test_a_move_the_other_host_has_no_room_for_says_where_and_what_to_do(fleet: Fleet) -> None:
    """h2's report left room for it, but calls in flight there hold all of it when the move
    comes: h2 refuses it before writing anything, and the answer is 507 `host_full` naming h2 and
    what did not fit, to move it to another host or free room on h2; not the advice for a create
    (ask for less memory or a smaller disk). The item stays where it was."""
    live, dirs = fleet.live, fleet.dirs
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "unhoused")
        snap = c.snapshot(name="unhoused")
        with fleet.h2_agent.room.capacity.ledger.hold(0, 0, 1 << 50):
            with pytest.raises(SanboxError) as refused:
                client.fleet.move_snapshot(snap.id, "h2")
            said = refused.value
            assert (said.code, said.status) == ("host_full", 507), said
            assert f"host h2 has no room for snapshot {snap.id}'s files (" in said.message
            assert f"`sanbox snapshot move {snap.id} --to HOST`" in said.message
            assert "free room on host h2" in said.message and "smaller disk" not in said.message
            assert _snapshots_on(dirs, snap.id) == ["h1"]

            with pytest.raises(SanboxError) as refused:
                c.move("h2")
            said = refused.value
            assert (said.code, said.status) == ("host_full", 507), said
            assert "host h2 has no room for computer unhoused's disk (1 GiB, " in said.message
            assert "`sanbox move unhoused --to HOST`" in said.message, said.message
            assert "smaller disk" not in said.message and "/" not in said.message.split("(")[0]
            cli = _sanbox(live, "move", "unhoused", "--to", "h2")
            assert cli.returncode != 0 and "host_full" in cli.stderr, cli.stderr
            assert _on(dirs, c.id) == ["h1"] and c.refresh().state == "stopped"
            failed = [e for e in c.events() if e.type == "computer.move_failed"]
            assert failed and "no room" in failed[-1].message, failed
        assert fleet.h2_agent.room.capacity.ledger.totals() == (0, 0, 0)
        client.snapshots.delete(snap.id)
        c.delete()


def test_the_holding_host_admits_the_copy_it_sends(fleet: Fleet) -> None:
    """The holding host wrote a move's export (a copy of the disk with the layers under it
    folded in) into its data dir unadmitted: a move could fill its disk. It is admitted whole
    before it is written: on h1, letting thin disks add up to 64x its free space, neither a disk
    nor a snapshot with 32 MiB written is sent from 40 MiB free (the copy, whole, beside the
    disks' promise at 1/64). The answer is 507 `host_full` naming h1 and what did not fit, to
    free room there; nothing is made on either host, the item stays where it was and the other
    host's reservation is given back. With room, each moves."""
    live, dirs, h1 = fleet.live, fleet.dirs, fleet.h1
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "sender")
        wrote = _qemu_io(_disk(dirs["h1"], c.id), "write -P 0x6b 0 32M")
        assert wrote.returncode == 0, wrote.stderr
        snap = c.snapshot(name="sender")  # its 32 MiB are the snapshot's layer, under the disk

        h1.free = 40 * MIB
        fleet.h1_agent.room = HostRoom(h1, disk_overcommit=64.0, disk_low_watermark=0.0)
        with pytest.raises(SanboxError) as refused:
            c.move("h2")
        said = refused.value
        assert (said.code, said.status) == ("host_full", 507), said
        assert said.message.startswith(
            "move failed: host h1, which holds it, has no room for the copy of computer "
            "sender's disk it sends (up to 1 GiB) now; the computer stays where it was, stopped"
        ), said.message
        assert "run `sanbox move sender` again" in said.message, said.message
        assert _on(dirs, c.id) == ["h1"] and c.refresh().state == "stopped"
        failed = [e for e in c.events() if e.type == "computer.move_failed"]
        assert failed and "has no room" in failed[-1].message, failed
        with pytest.raises(SanboxError) as refused:
            client.fleet.move_snapshot(snap.id, "h2")
        said = refused.value
        assert (said.code, said.status) == ("host_full", 507), said
        assert f"host h1, which holds it, has no room for the copy of snapshot {snap.id}'s" in (
            said.message
        )
        assert f"run `sanbox snapshot move {snap.id}` again" in said.message, said.message
        assert _snapshots_on(dirs, snap.id) == ["h1"]
        assert not (dirs["h1"] / "exports").exists() or not any((dirs["h1"] / "exports").iterdir())
        assert fleet.h1_agent.room.capacity.ledger.totals() == (0, 0, 0)
        assert _host(live, "h2").alloc_memory_mib == _host(live, "h2").alloc_disk_bytes == 0

        h1.free = 80 * MIB
        client.fleet.move_snapshot(snap.id, "h2")
        assert _snapshots_on(dirs, snap.id) == ["h2"]
        c.move("h2")
        assert _on(dirs, c.id) == ["h2"]
        client.snapshots.delete(snap.id)
        c.delete()


@pytest.mark.parametrize("fleet", [{"h3": "eu-1"}], indirect=True)
def test_a_move_placement_chose_a_full_host_for_is_placed_again(fleet: Fleet) -> None:
    """A move without `--to` that the host placement chose refused for room (`host_full`,
    before it wrote anything) failed, though a create is placed again elsewhere. It is placed
    again on another host of its region, none refused before (here: the other one); when every
    one refuses, the last refusal is the answer; a host named with `--to` is not replaced."""
    live, dirs, refusals = fleet.live, fleet.dirs, fleet.refusals
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        client.orgs.set_regions(client.orgs.list()[0].name, "eu-1")
        for name in ("h2", "h3"):
            client.fleet.drain(name)
        c = client.computers.create(name="placed", idle_timeout=0)
        for name in ("h2", "h3"):
            client.fleet.drain(name, False)
        c.stop()

        refusals.left = 1
        c.move()
        (full,) = refusals.by
        (there,) = _on(dirs, c.id)
        assert there in ("h2", "h3") and there != full
        events = [(e.type, e.data.get("host")) for e in c.events()]
        assert ("computer.refused", full) in events, events
        assert [t for t, _ in events].count("computer.moving") == 2, events

        refusals.left, refusals.by = 5, []
        with pytest.raises(SanboxError) as refused:
            c.move()
        said = refused.value
        assert (said.code, said.status) == ("host_full", 507), said
        assert sorted(refusals.by) == sorted({"h1", "h2", "h3"} - {there}), refusals.by
        assert f"host {refusals.by[-1]} has no room for computer placed's disk" in said.message
        assert _on(dirs, c.id) == [there] and c.refresh().state == "stopped"

        refusals.left, refusals.by = 5, []
        named = next(n for n in ("h1", "h2", "h3") if n != there)
        with pytest.raises(SanboxError) as refused:
            c.move(named)
        assert refused.value.code == "host_full" and refusals.by == [named]
        assert _on(dirs, c.id) == [there]
        refusals.left = 0
        hosts = {h.name: h for h in _hosts(live)}
        assert all(hosts[n].alloc_memory_mib == 0 for n in ("h1", "h2", "h3")), hosts
        c.delete()


@pytest.mark.parametrize("fleet", [{"h3": "eu-1"}], indirect=True)
def test_a_snapshot_move_placement_chose_a_full_host_for_is_placed_again(fleet: Fleet) -> None:
    """As a computer's: `sanbox snapshot move` without `--to` that the host placement chose
    refused for room is placed again on another host of its region (a `snapshot.refused` event
    names the one that refused); every one refusing, the last refusal is the answer; a host
    named is not replaced. It stays where it was until one takes it."""
    live, dirs, refusals = fleet.live, fleet.dirs, fleet.refusals
    fleet.h2.damage = False
    with Sanbox(live.url, live.key, timeout=60) as client:
        c = made_on_h1(client, "kept")
        snap = c.snapshot(name="kept")

        refusals.left = 1
        client.fleet.move_snapshot(snap.id)
        (full,) = refusals.by
        (there,) = _snapshots_on(dirs, snap.id)
        assert there in ("h2", "h3") and there != full
        events = [(e.type, e.data.get("host")) for e in c.events()]
        assert ("snapshot.refused", full) in events and ("snapshot.moved", None) in events, events

        refusals.left, refusals.by = 5, []
        with pytest.raises(SanboxError) as refused:
            client.fleet.move_snapshot(snap.id)
        said = refused.value
        assert (said.code, said.status) == ("host_full", 507), said
        assert sorted(refusals.by) == sorted({"h1", "h2", "h3"} - {there}), refusals.by
        assert f"host {refusals.by[-1]} has no room for snapshot {snap.id}'s files" in said.message
        assert _snapshots_on(dirs, snap.id) == [there]

        refusals.left, refusals.by = 5, []
        named = next(n for n in ("h1", "h2", "h3") if n != there)
        with pytest.raises(SanboxError) as refused:
            client.fleet.move_snapshot(snap.id, named)
        assert refused.value.code == "host_full" and refusals.by == [named]
        assert _snapshots_on(dirs, snap.id) == [there]
        refusals.left = 0
        hosts = {h.name: h for h in _hosts(live)}
        assert all(hosts[n].alloc_disk_bytes == 0 for n in ("h1", "h2", "h3")), hosts
        client.snapshots.delete(snap.id)
        c.delete()
