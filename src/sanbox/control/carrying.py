"""The parts a move of a computer (`moving.py`) and of a snapshot (`snapshot_moves.py`) share:
where it goes (`room`: a named host, or the best other host of its region), a retry that its
Idempotency-Key answers (`moved_by`), the holding host's export (`exported`) and the carry into
the other host (`carrying`), each refusal for room said as `host_full` naming that host, what
did not fit and what to do; the clean-ups after a carry, waited for at most `TIDY_TIMEOUT`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..fleet.errors import HostFullError, InsufficientCapacityError
from ..fleet.placement import Placement, Placer, Request
from ..host.door import DiskDamagedError, Host, HostError, SnapshotExport
from ..host.door import HostFullError as NoRoomError
from ..store.fleet_models import HostRow
from .errors import ConflictError, InvalidRequestError, failed
from .fleet import Fleet
from .host_errors import from_host

log = logging.getLogger(__name__)
T = TypeVar("T")
TIDY_TIMEOUT = 15.0  # a clean-up call after a carry, at most


def not_movable(kind: str, name: str, lies: str) -> InvalidRequestError:
    """A computer or snapshot of this server's own host (`lies`: "runs", "is"): no move."""
    return InvalidRequestError(
        f"{kind} {name} {lies} on this server's own host: only a {kind} on a fleet host moves "
        "(docs/fleet.md)",
        "not_movable",
    )


def moved_by(
    fleet: Fleet, key: str | None, last: str | None, host_id: str | None, to: str | None
) -> bool:
    """Whether the item's last move had this Idempotency-Key (then this request is answered as
    it is); `idempotency_conflict` if that move went elsewhere than the host `to` asks for."""
    if key is None or key != last:
        return False
    if to is not None and name_of(fleet, host_id or "") != to:
        raise ConflictError(
            f"this Idempotency-Key moved it to host {name_of(fleet, host_id or '')}, not {to}: "
            "use a new key for a new move",
            "idempotency_conflict",
        )
    return True


def room(
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


async def files(host: Host, item_id: str, export: SnapshotExport) -> AsyncGenerator[bytes, None]:
    """The bytes of an export's files, one after the other, as the taker reads them."""
    for f in export.files:
        async with contextlib.aclosing(host.export_chunks(item_id, str(f["name"]))) as chunks:
            async for data in chunks:
                yield data


class NoRoomThere(HostFullError):
    """The other host refused a carry for room (its own admission, before it wrote anything)."""


@dataclass
class Where:
    """Where a carry goes and what it takes there, as a refusal for room there says them: the
    other host's name, what it takes (its size, once its export says it) and the command that
    moves it."""

    host: str
    what: str
    again: str


async def exported(make: Awaitable[T], verb: str, now: str, sender: Where) -> T:
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
async def carrying(
    source: Host,
    item_id: str,
    verb: str,
    now: str,
    undo: Callable[[], Awaitable[None]],
    where: Where,
) -> AsyncIterator[None]:
    """A carry in progress: on a host error, `undo` removes whatever of it the other host kept
    (its import left nothing; this is for certain) and the error says the item stays where it
    was; however it ends, the sender's export files go. The other host refusing it for room
    (`host_full`: its own admission, before it wrote anything) is `host_full` (507), saying
    what did not fit there and what to do; its own words, which name its paths, are logged."""
    try:
        yield
    except HostError as exc:
        await tidy(undo(), f"what the other host kept of {item_id}")
        if exc.code == NoRoomError.code:
            log.info("%s of %s refused by host %s: %s", verb, item_id, where.host, exc)
            raise NoRoomThere(
                f"{verb} failed: host {where.host} has no room for {where.what} now; {now}. "
                f"Move it to another host of its region (`{where.again} --to HOST`), or free "
                f"room on host {where.host} (delete computers or snapshots there, or move them "
                "away) and move it again"
            ) from exc
        if exc.code != DiskDamagedError.code:
            raise from_host(exc, verb, item_id) from exc
        raise failed(verb, str(exc), now) from exc
    finally:
        await tidy(source.drop_export(item_id), f"the export of {item_id}")


def mib(n: int) -> str:
    return f"{-(-n // (1024 * 1024))} MiB"


async def tidy(step: Awaitable[None], what: str) -> None:
    """A clean-up after a carry, waited for at most `TIDY_TIMEOUT`: a host that does not answer
    (the one a carry stalled on, say) does not hold the answer back. What it keeps meanwhile
    goes later: an import whose stream was cut removes what it wrote; an export goes when the
    item is exported again or the host agent starts again."""
    try:
        async with asyncio.timeout(TIDY_TIMEOUT):
            await step
    except (HostError, TimeoutError) as exc:
        log.warning("%s is left for now: %s", what, str(exc) or "no answer in time")


def name_of(fleet: Fleet, host_id: str) -> str:
    with fleet.db.session() as s:
        return str(s.query(HostRow.name).filter(HostRow.id == host_id).scalar() or host_id)
