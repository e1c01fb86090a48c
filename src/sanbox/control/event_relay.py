"""Events other API nodes wrote, onto this node's bus (docs/fleet.md): on a database several
nodes share (PostgreSQL), each node waits for the `sanbox_events` hint (a NOTIFY at the commit of
each transaction that writes an event: `store/repo.add_event`) and, on a hint or every `POLL`
seconds, reads the events after those it has seen and publishes the ones it did not write
itself, so a server-sent event stream on any node shows what happened on every node and host.
Polling is the correctness path: a lost hint only delays an event by `POLL`. Ids come from a
sequence but commit in any order, so the newest `WINDOW` ids are read again and deduplicated.
Relayed events skip the bus's taps (each node counts and acts on its own events only)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from sqlalchemy import func, select

from ..fleet.notify import EVENTS, Listener
from ..store import Database
from ..store.models import EventRow
from .events import EventBus

log = logging.getLogger(__name__)

POLL = 1.0  # seconds between reads without a hint
WINDOW = 500  # ids below the newest seen that are read again: a transaction may commit late
BATCH = 1000  # events read at once


class EventRelay:
    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db, self.bus = db, bus
        with db.session() as s:  # what was written before this node started is history
            self._newest = int(s.scalar(select(func.max(EventRow.id))) or 0)
            old = select(EventRow.id).where(EventRow.id > self._newest - WINDOW)
            self._seen: set[int] = set(s.scalars(old))
        bus.taps.append(lambda ev: self._seen.add(ev.id))  # what this node publishes itself

    async def run(self) -> None:
        listener = Listener(self.db.url, EVENTS, POLL)
        try:
            while True:
                await asyncio.to_thread(listener.wait)
                try:
                    rows = await asyncio.to_thread(self._read)
                except Exception:  # the database is away: the next round reads again
                    log.exception("reading other nodes' events failed")
                    continue
                self.relay(rows)
        finally:
            listener.close()

    def _read(self) -> Sequence[EventRow]:
        with self.db.session() as s:
            q = select(EventRow).where(EventRow.id > self._newest - WINDOW)
            return s.scalars(q.order_by(EventRow.id).limit(BATCH)).all()

    def relay(self, rows: Sequence[EventRow]) -> int:
        """Publish the rows not seen yet (without the taps); how many."""
        fresh = [r for r in rows if r.id not in self._seen]
        for row in fresh:
            self._seen.add(row.id)
            self.bus.publish(row, tap=False)
        if rows:
            self._newest = max(self._newest, rows[-1].id)
            floor = self._newest - 2 * WINDOW
            self._seen = {i for i in self._seen if i > floor}
        return len(fresh)
