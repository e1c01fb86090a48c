"""`sanbox snapshot move`: a snapshot, its saved memory too, carried to another host of its
region in the order a computer's move keeps (`moving.py`): room reserved there, the holding
host's export checked and carried, checked and sealed under the other host's own key
(host/snapshot/transfer.py), then the record names that host, then the first copy goes. A move
without a named host that the host placement chose refuses for room (`host_full`, before it
wrote anything) is placed again on another host of its region, none that refused it before,
`PLACE_TRIES` hosts in all, as a computer's move and a create are; a host named is not."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Mapping

from sqlalchemy import select, update

from ..fleet.errors import InsufficientCapacityError
from ..fleet.placement import Placement, Placer, Request
from ..host.door import Host, HostError
from ..store import repo
from ..store.fleet_models import HostRow
from ..store.models import SnapshotRow
from . import carrying
from .errors import NotFoundError
from .fleet import VERB_WAIT, Fleet
from .provision import PLACE_TRIES

log = logging.getLogger(__name__)


async def move_snapshot(
    fleet: Fleet, snapshot_id: str, to: str | None = None, key: str | None = None
) -> SnapshotRow:
    """Move a snapshot (of any org: an operator's verb), its saved memory too, to host `to`
    (None: the best other host of its region): checked by its host, carried, checked and
    sealed under the other host's own key (host/snapshot/transfer.py); then the record names
    that host and the first copy goes (computers made from it keep the layers they stand on).
    One move of a snapshot at a time, across API nodes (its operation, by its id): a second,
    a retry say, waits for the first, then finds it where the first left it (and with the
    first's Idempotency-Key `key`, leaves it there)."""
    async with fleet.operating(snapshot_id, "move", wait=VERB_WAIT):
        return await _move_snapshot(fleet, snapshot_id, to, key)


async def _move_snapshot(
    fleet: Fleet, snapshot_id: str, to: str | None, key: str | None
) -> SnapshotRow:
    with fleet.db.session() as s:
        snap = s.get(SnapshotRow, snapshot_id)
        where = select(HostRow.region).where(HostRow.id == (snap.host_id if snap else None))
        region = s.scalar(where)
    if snap is None or snap.state != "ready":
        raise NotFoundError(f"no snapshot {snapshot_id}", "snapshot_not_found")
    if snap.host_id is None or fleet.remote is None or region is None:
        raise carrying.not_movable("snapshot", snap.id, "is")
    if carrying.moved_by(fleet, key, snap.move_key, snap.host_id, to):
        return snap
    req = Request(
        region=region, vcpus=0, memory_mib=0, disk_bytes=snap.size_bytes, layer=snap.image, vms=0
    )
    what = f"snapshot {snap.id}"
    source = fleet.host_at(snap.host_id, "the snapshot's host")  # (before room is reserved)
    placement, refused = carrying.room(fleet, req, snap.host_id, to, what), []
    refusal: tuple[str, dict[str, object]] | None = None
    while True:
        try:
            if refusal is not None:  # the refusal before, said once another host had room
                _event(fleet, snap, "snapshot.refused", *refusal)
            await _carry(fleet, snap, source, placement, key)
            break
        except carrying.NoRoomThere:
            Placer(fleet.db).release(placement)
            refused.append(placement.host_id)
            again = None
            if to is None and len(refused) < PLACE_TRIES:
                with contextlib.suppress(InsufficientCapacityError):
                    again = carrying.room(fleet, req, snap.host_id, None, what, refused)
            if again is None:  # a host named, 3 refused, or no other with room: the refusal
                raise
            host = placement.host_name
            refusal = f"host {host} has no room for {what}: moving it to another", {"host": host}
            placement = again
        except BaseException:
            Placer(fleet.db).release(placement)
            raise
    Placer(fleet.db).release(placement)
    try:
        await source.delete_snapshot(snap.id)
    except HostError as exc:  # deleted when the host is next told its set (host_sets.py)
        log.warning("the first copy of snapshot %s stays on its old host for now: %s", snap.id, exc)
    said = (
        f"snapshot {snap.id} moved to host {placement.host_name}; its files were checked there "
        "and sealed under that host's key"
    )
    data = {"from": carrying.name_of(fleet, snap.host_id), "to": placement.host_name}
    return _event(fleet, snap, "snapshot.moved", said, data)


async def _carry(
    fleet: Fleet, snap: SnapshotRow, source: Host, placement: Placement, key: str | None
) -> None:
    """The snapshot's files carried from `source`, its host, to the placement's host; then its
    record names that host, with the move's key."""
    assert snap.host_id is not None  # a fleet host's (`_move_snapshot`)
    target = fleet.host_at(placement.host_id, "the other host")
    image = fleet.image_for(snap.template, snap.image, source)
    there = fleet.image_for(snap.template, snap.image, target)
    stays = "the snapshot stays where it was"
    undo = functools.partial(target.delete_snapshot, snap.id)
    again = f"sanbox snapshot move {snap.id}"
    carried = carrying.Where(placement.host_name, f"snapshot {snap.id}'s files", again)
    copy = f"the copy of snapshot {snap.id}'s disk it sends (up to {snap.disk_gib} GiB)"
    sent = carrying.Where(carrying.name_of(fleet, snap.host_id), copy, again)
    async with carrying.carrying(source, snap.id, "snapshot move", stays, undo, carried):
        export = await carrying.exported(
            source.export_snapshot(snap.id, image), "snapshot move", stays, sent
        )
        carried.what += f" ({carrying.mib(export.size)})"
        async with contextlib.aclosing(carrying.files(source, snap.id, export)) as chunks:
            await target.import_snapshot(snap.id, export, there, chunks)
    with fleet.db.engine.begin() as conn:
        c = SnapshotRow.__table__.c
        conn.execute(
            update(SnapshotRow)
            .where(c.id == snap.id, c.host_id == snap.host_id)
            .values(host_id=placement.host_id, move_key=key)
        )


def _event(
    fleet: Fleet, snap: SnapshotRow, kind: str, said: str, data: Mapping[str, object]
) -> SnapshotRow:
    """An event of the snapshot's move (its org's, on its computer's stream); its record now."""
    with fleet.db.session() as s:
        ev = repo.add_event(
            s, snap.org_id, snap.computer_id, kind, said, {"snapshot": snap.id, **data}
        )
        now = s.get(SnapshotRow, snap.id)
    fleet.bus.publish(ev)
    assert now is not None
    return now
