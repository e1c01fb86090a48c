"""`sanbox move`: a stopped computer carried to another host of its region, its disk copied and
verified (host/disk/transfer.py). The order keeps one copy authoritative at every moment:

1. room is reserved on the other host (placement in the computer's region, never another: a
   named host of another region is `region_mismatch`, with nothing written);
2. the holding host makes the disk's file; its bytes stream through this API node into the
   other host, which checks size, SHA-256, format and the build under it before it keeps it;
3. only then does the record name the other host (its generation + 1, in one transaction);
4. then the first host's copy is destroyed (if that host does not answer now, it is told when it
   comes back: a host that rejoins stops and sets aside what is not placed on it).

A move that fails before 3 leaves the computer where it was, stopped, and nothing on the other
host; the answer says why (`move_failed`, or the host's error)."""

from __future__ import annotations

import contextlib
import logging

from sqlalchemy import update

from ..fleet.errors import HostNotFoundError, InsufficientCapacityError
from ..fleet.placement import Placement, Placer, Request
from ..host.door import GIB, DiskDamagedError, HostError
from ..store import repo
from ..store.models import ComputerRow, HostRow, Org
from .errors import ControlError, InvalidRequestError, NotFoundError, failed
from .fleet import Fleet
from .host_errors import from_host

log = logging.getLogger(__name__)


async def move(fleet: Fleet, computer_id: str, to: str | None = None) -> ComputerRow:
    """Move a stopped computer (of any org: an operator's verb) to host `to` (None: the best
    other host of its region)."""
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
        source = fleet.host_of(row)
        placement = _reserve(fleet, row, to)
        data = {"from": _name(fleet, row.host_id), **placement.event_data()}
        fleet.record(row.id, None, "computer.moving", f"moving to host {placement.host_name}", data)
        try:
            await _carry(fleet, row, placement)
        except BaseException as exc:
            Placer(fleet.db).release(placement)
            why = exc.message if isinstance(exc, ControlError) else str(exc)
            fleet.record(row.id, None, "computer.move_failed",
                         f"move to host {placement.host_name} failed: {why}; it stays where it "
                         "was, stopped", {"to": placement.host_name})  # fmt: skip
            raise
        moved = _put(fleet, row, placement)
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
            {"from": data["from"], "to": placement.host_name, "generation": moved},
        )
    raise AssertionError("unreachable")


def _reserve(fleet: Fleet, row: ComputerRow, to: str | None) -> Placement:
    req = Request(
        region=row.region or "",
        vcpus=row.vcpus,
        memory_mib=row.memory_mib,
        disk_bytes=row.disk_gib * GIB,
        layer=row.image,
    )
    placer = Placer(fleet.db)
    if to is None:
        try:
            return placer.place(req, None, exclude=[row.host_id or ""])
        except InsufficientCapacityError as exc:
            raise InsufficientCapacityError(
                f"no other host of region {req.region} has room for computer {row.name} "
                "and holds its build: add a host there, or free room"
            ) from exc
    host_id = _host_id(fleet, to)
    if host_id == row.host_id:
        raise InvalidRequestError(f"computer {row.name} is on host {to} already", "same_host")
    return placer.place_on(host_id, req, None)


async def _carry(fleet: Fleet, row: ComputerRow, placement: Placement) -> None:
    source, target = fleet.host_of(row), fleet.host_at(placement.host_id, "the other host")
    image = fleet.image_of(row)
    there = fleet.image_for(row.template, row.image, target)
    try:
        export = await source.export_disk(row.id, image)
    except HostError as exc:
        raise from_host(exc, "move", row.id) from exc
    try:
        await target.import_disk(row.id, export, there, source.export_chunks(row.id))
    except HostError as exc:
        with contextlib.suppress(HostError):
            await target.destroy(row.id)  # whatever of it arrived (its import left nothing)
        if exc.code != DiskDamagedError.code:
            raise from_host(exc, "move", row.id) from exc
        raise failed("move", str(exc), "the computer stays where it was, stopped") from exc
    finally:
        with contextlib.suppress(HostError):
            await source.drop_export(row.id)


def _put(fleet: Fleet, row: ComputerRow, placement: Placement) -> int:
    """The record names the other host, one generation on, in one transaction."""
    c = ComputerRow.__table__.c
    with fleet.db.engine.begin() as conn:
        generation = conn.execute(
            update(ComputerRow)
            .where(c.id == row.id, c.host_id == row.host_id)
            .values(host_id=placement.host_id, generation=c.generation + 1)
            .returning(c.generation)
        ).scalar()
    if generation is None:
        raise failed("move", "its record changed under the move", "look at it again")
    return int(generation)


def _host_id(fleet: Fleet, name: str) -> str:
    with fleet.db.session() as s:
        found = s.query(HostRow.id).filter(HostRow.name == name).scalar()
    if found is None:
        raise HostNotFoundError(f"no host named {name!r}: see `sanbox host ls`")
    return str(found)


def _name(fleet: Fleet, host_id: str) -> str:
    with fleet.db.session() as s:
        return str(s.query(HostRow.name).filter(HostRow.id == host_id).scalar() or host_id)
