"""Operations on computers, at most one incomplete per computer across every API node: `begin`
inserts the operation and the partial unique index on `computer_id WHERE finished_at IS NULL`
refuses a second (`BusyError`); no read-then-write. Each names the API node that began it: a node
that starts again closes what its previous life left (`abandon_node`). Its node `beat`s it every
`BEAT_EVERY` seconds while it runs, and `sweep_stale` closes operations whose node stopped
beating (it died and did not come back), however long they have run, with
`FOR UPDATE SKIP LOCKED` so many sweepers share the work without waiting on each other. A finished
operation means nothing to any reader (only incomplete ones are looked up): `prune_finished`
deletes those finished long enough ago, a bounded batch a call (control/retention.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import and_, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from ..store import Database
from ..store.fleet_models import OperationRow
from ..store.repo import new_id
from ..tasks import cancel_and_wait
from . import clock
from .errors import BusyError

log = logging.getLogger(__name__)

RUNNING, DONE, FAILED, ABANDONED = "running", "done", "failed", "abandoned"
BEAT_EVERY = 30.0  # seconds between the signs of life of a running operation's node
# an operation with no beat at all was begun by a node from before beats (an upgrade in
# progress): it is given the time an operation had then
UNBEATEN_STALE = 900.0


def node_name(home: Path) -> str:
    """An API node's name, the same across its restarts: its machine and its data dir (two
    nodes on one machine have their own)."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()[:48]}:{digest}"


@dataclass(frozen=True)
class Operation:
    op_id: str
    computer_id: str
    kind: str
    host_id: str | None
    started_at: datetime


@dataclass
class Held:
    """What holds a carried block now (`Operations.carried`): its operation, begun again if a
    sweep closed the first; `lost`, why the block was stopped, once no hold could be had."""

    op: Operation
    lost: str | None = None


class Operations:
    def __init__(self, db: Database) -> None:
        self.db = db

    def begin(
        self, computer_id: str, kind: str, host_id: str | None = None, node: str | None = None
    ) -> Operation:
        """Start `kind` on the computer (by API `node`), or `BusyError` if it has an incomplete
        operation."""
        op_id = new_id("op_")
        t = OperationRow.__table__.c
        try:
            with self.db.engine.begin() as conn:
                row = conn.execute(
                    insert(OperationRow)
                    .values(
                        op_id=op_id,
                        computer_id=computer_id,
                        kind=kind,
                        state=RUNNING,
                        host_id=host_id,
                        node=node,
                        started_at=clock.now(conn.dialect),
                        beat_at=clock.now(conn.dialect),
                    )
                    .returning(t.started_at)
                ).one()
        except IntegrityError:
            holder = self.incomplete(computer_id)
            raise BusyError(
                f"computer {computer_id} is busy"
                + (f" with {holder.kind} ({holder.op_id})" if holder else "")
                + ": try again shortly",
                computer_id,
                holder.op_id if holder else None,
            ) from None
        return Operation(op_id, computer_id, kind, host_id, row.started_at)

    def finish(self, op_id: str, error: str | None = None) -> bool:
        """Close it (`failed` with `error`); False if it was already closed (by a sweep)."""
        now = clock.now(self.db.engine.dialect)
        return self._while_open(
            op_id, state=FAILED if error else DONE, error=error, finished_at=now
        )

    def beat(self, op_id: str) -> bool:
        """Its node still runs it; False if it was closed meanwhile (by a sweep)."""
        return self._while_open(op_id, beat_at=clock.now(self.db.engine.dialect))

    def _while_open(self, op_id: str, **values: Any) -> bool:
        """Set `values` on the operation if it is still open; whether it was."""
        t = OperationRow.__table__.c
        with self.db.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(OperationRow)
                    .where(t.op_id == op_id, t.finished_at.is_(None))
                    .values(**values)
                ).rowcount
            )

    async def keep_beating(self, op_id: str, every: float | None = None) -> None:
        """`beat` every `BEAT_EVERY` seconds until cancelled (or until it was closed)."""
        while True:
            await asyncio.sleep(every or BEAT_EVERY)
            try:  # in a thread: a database that does not answer holds no event loop
                if not await asyncio.to_thread(self.beat, op_id):
                    log.warning("operation %s was closed by another node while it ran", op_id)
                    return
            except Exception:  # the database away a moment: the next beat tries again
                log.exception("operation %s: its beat was not written", op_id)

    @contextlib.asynccontextmanager
    async def carried(
        self, op: Operation, node: str | None, every: float | None = None
    ) -> AsyncIterator[Held]:
        """The block runs under `op`, beaten, and is never left running without a hold: an
        operation closed under it by a sweep (its node gave no sign of life long enough: a
        database out of reach, a stalled loop) is begun again at once if the computer has no
        other, else the block is cancelled and raises `BusyError` (another node works on the
        computer now; going on would be two at once). Yields what holds it now (`Held.op`), for
        the caller to finish."""
        owner = asyncio.current_task()
        assert owner is not None
        held = Held(op)
        holding = asyncio.ensure_future(self._hold(held, owner, node, every))
        try:
            yield held
        except asyncio.CancelledError:
            if held.lost is None or owner.uncancel() > 0:  # cancelled by someone else too
                raise
            raise BusyError(held.lost, op.computer_id, None) from None
        else:
            if held.lost is not None:  # the block caught its cancellation and ended anyway
                owner.uncancel()
                log.warning("%s; it ended meanwhile", held.lost)
        finally:
            await cancel_and_wait(holding)

    async def _hold(
        self, held: Held, owner: asyncio.Task[Any], node: str | None, every: float | None
    ) -> None:
        while True:
            await self.keep_beating(held.op.op_id, every)  # returns once the operation is closed
            op = held.op
            while True:
                try:
                    held.op = await self._begin_again(op, node)
                    break
                except BusyError as exc:
                    held.lost = (
                        f"{op.kind} of {op.computer_id} stopped: its operation was closed while "
                        f"it ran (this API node gave no sign of life in time), and another "
                        f"has begun since ({exc.op_id}); see that one's outcome"
                    )
                    owner.cancel()
                    return
                except Exception:  # the database away a moment: tried again
                    log.exception("operation %s: could not be begun again", op.op_id)
                    await asyncio.sleep(every or BEAT_EVERY)
            log.warning(
                "operation %s was closed while it ran: held again as %s", op.op_id, held.op.op_id
            )

    async def _begin_again(self, op: Operation, node: str | None) -> Operation:
        """`begin` of `op`'s computer and kind again, in a thread. If the block ends meanwhile
        (this is cancelled), the thread still runs to its end: what it began is finished here,
        never left holding the computer until a sweep."""
        begun = asyncio.ensure_future(
            asyncio.to_thread(self.begin, op.computer_id, op.kind, op.host_id, node)
        )
        try:
            return await asyncio.shield(begun)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self.finish((await begun).op_id)
            raise

    def incomplete(self, computer_id: str) -> Operation | None:
        t = OperationRow.__table__.c
        with self.db.engine.connect() as conn:
            row = conn.execute(
                select(t.op_id, t.computer_id, t.kind, t.host_id, t.started_at).where(
                    t.computer_id == computer_id, t.finished_at.is_(None)
                )
            ).one_or_none()
        return Operation(*row) if row else None

    def abandon_node(self, node: str) -> int:
        """Close as `abandoned` what `node` left incomplete (it started again: none of it runs);
        how many."""
        t = OperationRow.__table__.c
        with self.db.engine.begin() as conn:
            return int(
                conn.execute(
                    update(OperationRow)
                    .where(t.node == node, t.finished_at.is_(None))
                    .values(
                        state=ABANDONED,
                        error="its API node restarted",
                        finished_at=clock.now(conn.dialect),
                    )
                ).rowcount
            )

    def prune_finished(self, older_than: float, batch: int) -> int:
        """Delete up to `batch` operations finished more than `older_than` seconds ago (by the
        database's clock), oldest first, skipping rows another sweeper holds; how many went.
        An incomplete operation (`finished_at` None) is never one: the partial unique index on
        those is the guard across API nodes."""
        t = OperationRow.__table__.c
        with self.db.engine.begin() as conn:
            ids = conn.scalars(
                select(t.id)
                .where(
                    t.state.in_((DONE, FAILED, ABANDONED)),
                    t.finished_at.is_not(None),
                    t.finished_at < clock.at(conn.dialect, -older_than),
                )
                .order_by(t.finished_at)
                .limit(batch)
                .with_for_update(skip_locked=True)
            ).all()
            if ids:
                conn.execute(delete(OperationRow).where(t.id.in_(ids), t.finished_at.is_not(None)))
        return len(ids)

    def sweep_stale(self, older_than: float, limit: int = 100) -> list[Operation]:
        """Close as `abandoned` up to `limit` operations whose node has given no sign of life
        (a beat; `begin` is the first) for more than `older_than` seconds (by the database's
        clock; one with none, begun by a node from before beats, `UNBEATEN_STALE`), skipping
        rows another sweeper holds."""
        t = OperationRow.__table__.c
        with self.db.engine.begin() as conn:
            d = conn.dialect
            silent = or_(
                t.beat_at < clock.at(d, -older_than),
                and_(t.beat_at.is_(None), t.started_at < clock.at(d, -UNBEATEN_STALE)),
            )
            rows = conn.execute(
                select(t.id, t.op_id, t.computer_id, t.kind, t.host_id, t.started_at)
                .where(t.finished_at.is_(None), silent)
                .order_by(t.started_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            if rows:
                conn.execute(
                    update(OperationRow)
                    .where(t.id.in_([r.id for r in rows]))
                    .values(
                        state=ABANDONED,
                        error=f"its node gave no sign of life in {older_than:g} s",
                        finished_at=clock.now(d),
                    )
                )
        return [Operation(r.op_id, r.computer_id, r.kind, r.host_id, r.started_at) for r in rows]
