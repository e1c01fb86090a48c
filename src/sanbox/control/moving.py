"""`sanbox move`: a stopped computer carried to another host of its region, its disk copied and
verified (host/disk/transfer.py); `sanbox snapshot move`: a snapshot with its saved memory, the
same way (host/snapshot/transfer.py). The order keeps one copy authoritative at every moment:

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

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import select, update

from ..fleet.errors import HostFullError, InsufficientCapacityError
from ..fleet.placement import Placement, Placer, Request
from ..host.door import GIB, DiskDamagedError, Host, HostError, SnapshotExport
from ..host.door import HostFullError as NoRoomError
from ..store import repo
from ..store.fleet_models import HostRow
from ..store.models import ComputerRow, Org, SnapshotRow
from .errors import ConflictError, ControlError, InvalidRequestError, NotFoundError, failed
from .fleet import VERB_WAIT, Fleet
from .host_errors import from_host
from .provision import PLACE_TRIES

log = logging.getLogger(__name__)
T = TypeVar("T")
DISK = "disk.qcow2"  # the one file a moving disk is (host/machines/carry.py)
TIDY_TIMEOUT = 15.0  # a clean-up call after a carry, at most


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
            raise InvalidRequestError(
                f"computer {row.name} runs on this server's own host: only a computer on a "
                "fleet host moves (docs/fleet.md)",
                "not_movable",
            )
        if _moved_by(fleet, key, row.move_key, row.host_id, to):
            return row
        source, came_from = fleet.host_of(row), _name(fleet, row.host_id)
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
        data = {"from": _name(fleet, row.host_id or ""), **placement.event_data()}
        fleet.record(row.id, None, "computer.moving", f"moving to host {placement.host_name}", data)
        try:
            await _carry(fleet, row, placement)
            return placement
        except BaseException as exc:
            Placer(fleet.db).release(placement)
            refused.append(placement.host_id)
            again = _again(fleet, row, to, refused) if isinstance(exc, _NoRoomThere) else None
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


def _moved_by(
    fleet: Fleet, key: str | None, last: str | None, host_id: str | None, to: str | None
) -> bool:
    """Whether the item's last move had this Idempotency-Key (then this request is answered as
    it is); `idempotency_conflict` if that move went elsewhere than the host `to` asks for."""
    if key is None or key != last:
        return False
    if to is not None and _name(fleet, host_id or "") != to:
        raise ConflictError(
            f"this Idempotency-Key moved it to host {_name(fleet, host_id or '')}, not {to}: "
            "use a new key for a new move",
            "idempotency_conflict",
        )
    return True


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
    return _room(fleet, req, row.host_id, to, f"computer {row.name}", refused)


def _room(
    fleet: Fleet,
    req: Request,
    now: str | None,
    to: str | None,
    what: str,
    refused: Sequence[str] = (),
) -> Placement:
    """Room for `req` on host `to`, or on the best host of its region but `now` (and those that
    `refused` it)."""
    placer = Placer(fleet.db, node=fleet.node)
    if to is None:
        try:
            return placer.place(req, None, exclude=[now or "", *refused])
        except InsufficientCapacityError as exc:
            raise InsufficientCapacityError(
                f"no other host of region {req.region} has room for {what} and holds its "
                "build: add a host there, or free room"
            ) from exc
    assert fleet.remote is not None  # a fleet host holds what moves
    host_id = fleet.remote.get(to).id  # `host_not_found` when there is none
    if host_id == now:
        raise InvalidRequestError(f"{what} is on host {to} already", "same_host")
    return placer.place_on(host_id, req, None)


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
        raise InvalidRequestError(
            f"snapshot {snap.id} is on this server's own host: only a snapshot on a fleet host "
            "moves (docs/fleet.md)",
            "not_movable",
        )
    if _moved_by(fleet, key, snap.move_key, snap.host_id, to):
        return snap
    req = Request(
        region=region, vcpus=0, memory_mib=0, disk_bytes=snap.size_bytes, layer=snap.image, vms=0
    )
    placement = _room(fleet, req, snap.host_id, to, f"snapshot {snap.id}")
    source = fleet.host_at(snap.host_id, "the snapshot's host")
    try:
        target = fleet.host_at(placement.host_id, "the other host")
        image = fleet.image_for(snap.template, snap.image, source)
        there = fleet.image_for(snap.template, snap.image, target)
        stays = "the snapshot stays where it was"
        undo = functools.partial(target.delete_snapshot, snap.id)
        again = f"sanbox snapshot move {snap.id}"
        carried = _Where(placement.host_name, f"snapshot {snap.id}'s files", again)
        copy = f"the copy of snapshot {snap.id}'s disk it sends (up to {snap.disk_gib} GiB)"
        sent = _Where(_name(fleet, snap.host_id), copy, again)
        async with _carrying(source, snap.id, "snapshot move", stays, undo, carried):
            made = source.export_snapshot(snap.id, image)
            export = await _exported(made, "snapshot move", stays, sent)
            carried.what += f" ({_mib(export.size)})"
            async with contextlib.aclosing(_files(source, snap.id, export)) as chunks:
                await target.import_snapshot(snap.id, export, there, chunks)
        with fleet.db.engine.begin() as conn:
            c = SnapshotRow.__table__.c
            conn.execute(
                update(SnapshotRow)
                .where(c.id == snap.id, c.host_id == snap.host_id)
                .values(host_id=placement.host_id, move_key=key)
            )
    finally:
        Placer(fleet.db).release(placement)
    try:
        await source.delete_snapshot(snap.id)
    except HostError as exc:  # deleted when the host is next told its set (host_sets.py)
        log.warning("the first copy of snapshot %s stays on its old host for now: %s", snap.id, exc)
    with fleet.db.session() as s:
        said = (
            f"snapshot {snap.id} moved to host {placement.host_name}; its files were checked "
            "there and sealed under that host's key"
        )
        data = {"snapshot": snap.id, "from": _name(fleet, snap.host_id), "to": placement.host_name}
        ev = repo.add_event(s, snap.org_id, snap.computer_id, "snapshot.moved", said, data)
        moved = s.get(SnapshotRow, snap.id)
    fleet.bus.publish(ev)
    assert moved is not None
    return moved


async def _files(host: Host, item_id: str, export: SnapshotExport) -> AsyncGenerator[bytes, None]:
    """The bytes of an export's files, one after the other, as the taker reads them."""
    for f in export.files:
        async with contextlib.aclosing(host.export_chunks(item_id, str(f["name"]))) as chunks:
            async for data in chunks:
                yield data


async def _carry(fleet: Fleet, row: ComputerRow, placement: Placement) -> None:
    source, target = fleet.host_of(row), fleet.host_at(placement.host_id, "the other host")
    image = fleet.image_of(row)
    there = fleet.image_for(row.template, row.image, target)
    stays = "the computer stays where it was, stopped"
    copy = f"the copy of computer {row.name}'s disk it sends (up to {row.disk_gib} GiB)"
    sent = _Where(_name(fleet, row.host_id or ""), copy, f"sanbox move {row.name}")
    try:
        export = await _exported(source.export_disk(row.id, image), "move", stays, sent)
    except HostError as exc:
        raise from_host(exc, "move", row.id) from exc
    written = f"{-(-export.virtual_size // GIB)} GiB, {_mib(export.size)} of it written"
    what = f"computer {row.name}'s disk ({written})"
    where = _Where(placement.host_name, what, f"sanbox move {row.name}")
    undo = functools.partial(target.destroy, row.id)
    async with (
        _carrying(source, row.id, "move", stays, undo, where),
        contextlib.aclosing(source.export_chunks(row.id, DISK)) as chunks,
    ):
        await target.import_disk(row.id, export, there, chunks)


class _NoRoomThere(HostFullError):
    """The other host refused a carry for room (its own admission, before it wrote anything)."""


@dataclass
class _Where:
    """Where a carry goes and what it takes there, as a refusal for room there says them: the
    other host's name, what it takes (its size, once its export says it) and the command that
    moves it."""

    host: str
    what: str
    again: str


async def _exported(make: Awaitable[T], verb: str, now: str, sender: _Where) -> T:
    """The holding host's export (`make`). That host refusing it for room (`host_full`: its own
    admission, before it wrote anything) is `host_full` (507) naming that host and what did not
    fit there, to free room there; its own words, which name its paths, are logged."""
    try:
        return await make
    except HostError as exc:
        if exc.code != NoRoomError.code:
            raise
        log.info("%s refused by host %s, which holds it: %s", verb, sender.host, exc)
        raise HostFullError(
            f"{verb} failed: host {sender.host}, which holds it, has no room for {sender.what} "
            f"now; {now}. Free room on host {sender.host} (delete computers or snapshots there, "
            f"or move them away) and run `{sender.again}` again"
        ) from exc


@contextlib.asynccontextmanager
async def _carrying(
    source: Host,
    item_id: str,
    verb: str,
    now: str,
    undo: Callable[[], Awaitable[None]],
    where: _Where,
) -> AsyncIterator[None]:
    """A carry in progress: on a host error, `undo` removes whatever of it the other host kept
    (its import left nothing; this is for certain) and the error says the item stays where it
    was; however it ends, the sender's export files go. The other host refusing it for room
    (`host_full`: its own admission, before it wrote anything) is `host_full` (507), saying
    what did not fit there and what to do; its own words, which name its paths, are logged."""
    try:
        yield
    except HostError as exc:
        await _tidy(undo(), f"what the other host kept of {item_id}")
        if exc.code == NoRoomError.code:
            log.info("%s of %s refused by host %s: %s", verb, item_id, where.host, exc)
            raise _NoRoomThere(
                f"{verb} failed: host {where.host} has no room for {where.what} now; {now}. "
                f"Move it to another host of its region (`{where.again} --to HOST`), or free "
                f"room on host {where.host} (delete computers or snapshots there, or move them "
                "away) and move it again"
            ) from exc
        if exc.code != DiskDamagedError.code:
            raise from_host(exc, verb, item_id) from exc
        raise failed(verb, str(exc), now) from exc
    finally:
        await _tidy(source.drop_export(item_id), f"the export of {item_id}")


def _mib(n: int) -> str:
    return f"{-(-n // (1024 * 1024))} MiB"


async def _tidy(step: Awaitable[None], what: str) -> None:
    """A clean-up after a carry, waited for at most `TIDY_TIMEOUT`: a host that does not answer
    (the one a carry stalled on, say) does not hold the answer back. What it keeps meanwhile
    goes later: an import whose stream was cut removes what it wrote; an export goes when the
    item is exported again or the host agent starts again."""
    try:
        async with asyncio.timeout(TIDY_TIMEOUT):
            await step
    except (HostError, TimeoutError) as exc:
        log.warning("%s is left for now: %s", what, str(exc) or "no answer in time")


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


def _name(fleet: Fleet, host_id: str) -> str:
    with fleet.db.session() as s:
        return str(s.query(HostRow.name).filter(HostRow.id == host_id).scalar() or host_id)
