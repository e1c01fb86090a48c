"""Tables whose rows are kept for a while, then swept (run by the server every `SWEEP_INTERVAL`
seconds, in a thread), in transactions of at most `batch` rows so no request waits long behind
a sweep:
- `Sweeper`, an org's rows (the audit log, events): older than `retention` go and, per org, all
  but its newest `org_cap`. Between two sweeps an org may go over its cap by what it writes
  meanwhile (bounded by what writes its rows: its keys' request rate, its computers' denials
  and state changes).
- `FinishedOperations`: the operations on computers (fleet/operations.py) finished longer ago
  than `retention` (a tenant's loop of verbs, or a host's settles, write one each; nothing
  reads a finished one for meaning). An incomplete operation is never swept."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ..fleet.operations import Operations
from ..store import Database, repo
from ..store.retention import prune_old, prune_org

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 300.0  # seconds between two sweeps
SWEEP_BATCH = 1000  # rows deleted in one transaction
OPERATION_RETENTION_DAYS = 7.0  # finished operations older go (SANBOX_OPERATION_RETENTION_DAYS)


class Sweep:
    """What every sweep of a table shares: its batches until one comes back short, and the
    periodic run. A subclass says what one sweep deletes (`sweep`)."""

    def __init__(self, db: Database, what: str, retention: timedelta, batch: int) -> None:
        if batch < 1 or retention <= timedelta(0):
            raise ValueError("batch must be at least 1, retention positive")
        self.db, self.what, self.retention, self.batch = db, what, retention, batch

    def sweep(self) -> int:
        """Delete what is past keeping; how many rows went. Blocking: run in a thread."""
        raise NotImplementedError

    def _until_done(self, prune: Callable[[], int]) -> int:
        gone = 0
        while True:
            n = prune()
            gone += n
            if n < self.batch:
                return gone

    async def sweep_every(self, interval: float = SWEEP_INTERVAL) -> None:
        """Sweep now and then every `interval` seconds, until cancelled; a failed sweep is logged
        and tried again at the next."""
        while True:
            try:
                gone = await asyncio.to_thread(self.sweep)
                if gone:
                    log.info("%s: %d past their retention or their cap went", self.what, gone)
            except Exception:
                log.exception("%s: sweep failed", self.what)
            await asyncio.sleep(interval)


class Sweeper(Sweep):
    def __init__(
        self,
        db: Database,
        model: Any,
        what: str,
        retention: timedelta,
        org_cap: int,
        batch: int = SWEEP_BATCH,
    ) -> None:
        if org_cap < 1:
            raise ValueError("org_cap must be at least 1")
        super().__init__(db, what, retention, batch)
        self.model, self.org_cap = model, org_cap

    def sweep(self, now: datetime | None = None) -> int:
        """Delete rows past the retention, then each org's beyond its cap, a batch per
        transaction; returns how many went. Blocking: the server runs it in a thread."""
        before = (now or datetime.now(UTC)) - self.retention
        gone = self._until_done(functools.partial(self._prune_old, before))
        with self.db.session() as s:
            org_ids = [o.id for o in repo.list_orgs(s)]
        for org_id in org_ids:
            gone += self._until_done(functools.partial(self._prune_org, org_id))
        return gone

    def _prune_old(self, before: datetime) -> int:
        with self.db.session() as s:
            return prune_old(s, self.model, before, self.batch)

    def _prune_org(self, org_id: str) -> int:
        with self.db.session() as s:
            return prune_org(s, self.model, org_id, self.org_cap, self.batch)


class FinishedOperations(Sweep):
    """The operations finished longer ago than `retention` (by the database's clock, which wrote
    their `finished_at`), oldest first; many API nodes sweep side by side, each skipping the
    rows another holds."""

    def __init__(self, db: Database, retention: timedelta, batch: int = SWEEP_BATCH) -> None:
        super().__init__(db, "finished operations", retention, batch)
        self.operations = Operations(db)

    def sweep(self) -> int:
        older_than = self.retention.total_seconds()
        return self._until_done(lambda: self.operations.prune_finished(older_than, self.batch))
