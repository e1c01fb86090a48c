"""`sanbox move`: a stopped computer carried to another host of its region, its disk copied and
verified (host/disk/transfer.py); `sanbox snapshot move`: a snapshot with its saved memory, the
same way (host/snapshot/transfer.py, `snapshot_moves.py`; their shared parts: `carrying.py`).
The order keeps one copy authoritative at every moment:

1. room is reserved on the other host (placement in the computer's region, never another: a
   named host of another region is `region_mismatch`, with nothing written);
2. the holding host makes the disk's file; its bytes stream through this API node into the
   other host, which checks size, SHA-256, format and the build under it before it keeps it;
3. only then does the record name the other host (its generation + 1, in one transaction);
4. then the first host's copy is destroyed (if that host does not answer now, it is told when it
   comes back: a host that rejoins stops and sets aside what is not placed on it).

A move that fails before 3 leaves the computer where it was, stopped, and nothing on the other
host; the answer says why (`move_failed`, or the host's error). The other host admits what comes
before it writes it (fleet/link/carry_routes.py): no room there is `host_full` (507), naming that
host and what did not fit, to move it elsewhere or free room there. The holding host admits the
export it writes in 2 the same way (`HostRoom.exported`): no room there is `host_full` naming it,
to free room there, with nothing made.

A move without a named host goes to the best host but the one that holds the item, so the same
request sent again (a caller that lost the answer) would carry it once more. A request with an
`Idempotency-Key` is safe to send again: the key is written with step 3 (`move_key`), and a move
with the key the item's last move had answers where that move left it, carrying nothing (one
asking for another host than that: 409 `idempotency_conflict`). Moves of one item run one at a
time, so a retry sent while the first still runs waits for it, then answers."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Sequence

from sqlalchemy import update

from ..fleet.errors import InsufficientCapacityError
from ..fleet.placement import Placement, Placer, Request
from ..host.door import GIB, HostError
from ..store import repo
from ..store.models import ComputerRow, Org
from .carrying import (
    NoRoomThere,
    Where,
    carrying,
    exported,
    mib,
    moved_by,
    name_of,
    not_movable,
    room,
)
from .errors import ControlError, NotFoundError, failed
from .fleet import Fleet
from .host_errors import from_host
from .provision import PLACE_TRIES

log = logging.getLogger(__name__)
DISK = "disk.qcow2"  # the one file a moving disk is (host/machines/carry.py)


async def move(
    fleet: Fleet, computer_id: str, to: str | None = None, key: str | None = None
) -> ComputerRow:
    """Move a stopped computer (of any org: an operator's verb) to host `to` (None: the best
    other host of its region); with the Idempotency-Key `key` of its last move, as it is."""
    with fleet.db.session() as s:
        found = repo.computer_by_id(s, computer_id)
        org = s.get(Org, found.org_id) if found is not None else None
    if found is None or org is None:
        raise NotFoundError(f"no computer {computer_id}", "computer_not_found")
    async with fleet.acting(org, computer_id, "move") as row:
        if row.host_id is None or fleet.remote is None:
            raise not_movable("computer", row.name, "runs")
        if moved_by(fleet, key, row.move_key, row.host_id, to):
            return row
        source, came_from = fleet.host_of(row), name_of(fleet, row.host_id)
        placement = await _carried(fleet, row, to)
        moved = _put(fleet, row, placement, key)
        Placer(fleet.db).release(placement)  # the host's next report counts the disk
        try:
            await source.destroy(row.id)
        except HostError as exc:  # told the set it should run when it answers again
            log.warning("the first copy of %s stays on its old host for now: %s", row.id, exc)
        return fleet.record(
            row.id,
            None,
            "computer.moved",
            f"moved to host {placement.host_name}; its disk was copied and verified",
            {"from": came_from, "to": placement.host_name, "generation": moved},
        )
    raise AssertionError("unreachable")


async def _carried(fleet: Fleet, row: ComputerRow, to: str | None) -> Placement:
    """Room reserved on host `to` (None: the best other host of its region) and the computer's
    disk carried there, its reservation held. A host placement chose that refuses it for room
    (`host_full`, before it wrote anything) is given back and another tried, none refused
    before, `PLACE_TRIES` hosts in all, as a create is placed again; a host named is not. What
    failed last is recorded (`computer.move_failed`) and raised."""
    placement, refused = _reserve(fleet, row, to), []
    while True:
        data = {"from": name_of(fleet, row.host_id or ""), **placement.event_data()}
        fleet.record(row.id, None, "computer.moving", f"moving to host {placement.host_name}", data)
        try:
            await _carry(fleet, row, placement)
            return placement
        except BaseException as exc:
            Placer(fleet.db).release(placement)
            refused.append(placement.host_id)
            again = _again(fleet, row, to, refused) if isinstance(exc, NoRoomThere) else None
            if again is None:
                why = exc.message if isinstance(exc, ControlError) else str(exc)
                said = f"move to host {placement.host_name} failed: {why}; it stays where it was"
                data = {"to": placement.host_name}
                fleet.record(row.id, None, "computer.move_failed", f"{said}, stopped", data)
                raise
            said = f"host {placement.host_name} has no room for it: moving it to another"
            fleet.record(row.id, None, "computer.refused", said, {"host": placement.host_name})
            placement = again


def _again(fleet: Fleet, row: ComputerRow, to: str | None, refused: list[str]) -> Placement | None:
    """Room on another host for a move whose host, chosen by placement, refused it: none of the
    `refused`; None when it named its host, `PLACE_TRIES` hosts refused it, or no other host of
    its region has room (the last refusal then says what to do)."""
    if to is not None or len(refused) >= PLACE_TRIES:
        return None
    with contextlib.suppress(InsufficientCapacityError):
        return _reserve(fleet, row, None, refused)
    return None


def _reserve(
    fleet: Fleet, row: ComputerRow, to: str | None, refused: Sequence[str] = ()
) -> Placement:
    req = Request(
        region=row.region or "",
        vcpus=row.vcpus,
        memory_mib=row.memory_mib,
        disk_bytes=row.disk_gib * GIB,
        layer=row.image,
    )
    return room(fleet, req, row.host_id, to, f"computer {row.name}", refused)


async def _carry(fleet: Fleet, row: ComputerRow, placement: Placement) -> None:
    source, target = fleet.host_of(row), fleet.host_at(placement.host_id, "the other host")
    image = fleet.image_of(row)
    there = fleet.image_for(row.template, row.image, target)
    stays = "the computer stays where it was, stopped"
    copy = f"the copy of computer {row.name}'s disk it sends (up to {row.disk_gib} GiB)"
    sent = Where(name_of(fleet, row.host_id or ""), copy, f"sanbox move {row.name}")
    try:
        export = await exported(source.export_disk(row.id, image), "move", stays, sent)
    except HostError as exc:
        raise from_host(exc, "move", row.id) from exc
    written = f"{-(-export.virtual_size // GIB)} GiB, {mib(export.size)} of it written"
    what = f"computer {row.name}'s disk ({written})"
    where = Where(placement.host_name, what, f"sanbox move {row.name}")
    undo = functools.partial(target.destroy, row.id)
    async with (
        carrying(source, row.id, "move", stays, undo, where),
        contextlib.aclosing(source.export_chunks(row.id, DISK)) as chunks,
    ):
        await target.import_disk(row.id, export, there, chunks)


def _put(fleet: Fleet, row: ComputerRow, placement: Placement, key: str | None) -> int:
    """The record names the other host, one generation on, and the move's key, in one
    transaction."""
    c = ComputerRow.__table__.c
    with fleet.db.engine.begin() as conn:
        generation = conn.execute(
            update(ComputerRow)
            .where(c.id == row.id, c.host_id == row.host_id)
            .values(host_id=placement.host_id, generation=c.generation + 1, move_key=key)
            .returning(c.generation)
        ).scalar()
    if generation is None:
        raise failed("move", "its record changed under the move", "look at it again")
    return int(generation)
