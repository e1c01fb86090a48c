"""The API nodes sharing one PostgreSQL database, and how many are alive: each `sanbox server`
on PostgreSQL `beat`s its row (named as its operations are, `operations.node_name`) every
`BEAT_EVERY` seconds and, in the same transaction, counts the nodes that beat within `LIVE_FOR`
seconds on the database's clock; the count goes to its `NodeShare`, which every per-process bound
of an org (request rates, open requests) divides by. Read every few seconds, never per request.

A node that stops cleanly removes its row (`leave`): the others take its share back at their next
beat. One that dies stops beating: after `LIVE_FOR` the others count it out and take its share
back. A node that starts is counted by the others at their next beat (until then they allow their
old share: at most `BEAT_EVERY` seconds of more than the bound). On SQLite there is one process
and nothing to share: no row, the share stays the whole bound. A beat also deletes the rows of
nodes silent for `FORGET_AFTER` (gone for good), so the table holds the nodes of the last day."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from ..store import Database
from ..store.fleet_models import ApiNodeRow
from ..tasks import cancel_and_wait
from . import clock
from .node_share import NodeShare

log = logging.getLogger(__name__)

BEAT_EVERY = 5.0  # seconds between a node's beats (and its reads of the count)
LIVE_FOR = 15.0  # a node silent this long is counted out: three beats missed
FORGET_AFTER = 24 * 3600.0  # a node silent this long has its row deleted

_T = ApiNodeRow.__table__.c


class ApiNodes:
    """This node's row in the registry of API nodes, and its `share` kept to the count."""

    def __init__(
        self,
        db: Database,
        name: str,
        share: NodeShare,
        every: float = BEAT_EVERY,
        live_for: float = LIVE_FOR,
    ) -> None:
        self.db, self.name, self.share = db, name, share
        self.every, self.live_for = every, live_for
        self.task: asyncio.Task[None] | None = None  # the beats, while `serving`

    @property
    def shared(self) -> bool:
        """Whether other processes may share the bounds: only on PostgreSQL."""
        return self.db.engine.dialect.name == "postgresql"

    def beat(self) -> int:
        """This node is alive; how many nodes are now (itself included), given to `share`."""
        with self.db.engine.begin() as conn:
            d = conn.dialect
            insert: Any = postgresql.insert if d.name == "postgresql" else sqlite.insert
            ins = insert(ApiNodeRow).values(
                name=self.name, started_at=clock.now(d), beat_at=clock.now(d)
            )
            conn.execute(
                ins.on_conflict_do_update(
                    index_elements=["name"], set_={"beat_at": ins.excluded.beat_at}
                )
            )
            conn.execute(delete(ApiNodeRow).where(_T.beat_at < clock.at(d, -FORGET_AFTER)))
            live = conn.execute(
                select(func.count()).where(_T.beat_at >= clock.at(d, -self.live_for))
            ).scalar_one()
        self.share.set(int(live))
        return self.share.nodes

    def leave(self) -> None:
        """This node stops: its row goes, so the others count it out at their next beat."""
        with self.db.engine.begin() as conn:
            conn.execute(delete(ApiNodeRow).where(_T.name == self.name))

    async def keep_beating(self) -> None:
        """`beat` every `every` seconds until cancelled; a beat the database missed is tried
        again at the next (the share stays as it was meanwhile)."""
        while True:
            await asyncio.sleep(self.every)
            try:  # in a thread: a database that does not answer holds no event loop
                await asyncio.to_thread(self.beat)
            except Exception:
                log.exception("API node %s: its beat was not written", self.name)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """This node in the registry for the block (on PostgreSQL): a first beat before it, so
        the share is right from the first request, then `keep_beating`; `leave` after it."""
        if not self.shared:
            yield
            return
        await asyncio.to_thread(self.beat)
        self.task = asyncio.ensure_future(self.keep_beating())
        try:
            yield
        finally:
            await cancel_and_wait(self.task)
            try:
                await asyncio.to_thread(self.leave)
            except Exception:  # the database away: the others count it out after LIVE_FOR
                log.exception("API node %s: its row was not removed", self.name)
