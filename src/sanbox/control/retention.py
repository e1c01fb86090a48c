"""A table whose rows are kept for a while (the audit log, events): `sweep` (run by the server
every `SWEEP_INTERVAL` seconds, in a thread) deletes rows older than `retention` and, per org,
all but its newest `org_cap`, in transactions of at most `batch` rows so no request waits long
behind it. Between two sweeps an org may go over its cap by what it writes meanwhile (bounded by
what writes its rows: its keys' request rate, its computers' denials and state changes)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from ..store import Database, repo
from ..store.retention import prune_old, prune_org

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 300.0  # seconds between two sweeps
SWEEP_BATCH = 1000  # rows deleted in one transaction


class Sweeper:
    def __init__(
        self,
        db: Database,
        model: Any,
        what: str,
        retention: timedelta,
        org_cap: int,
        batch: int = SWEEP_BATCH,
    ) -> None:
        if org_cap < 1 or batch < 1 or retention <= timedelta(0):
            raise ValueError("org_cap and batch must be at least 1, retention positive")
        self.db, self.model, self.what = db, model, what
        self.retention, self.org_cap, self.batch = retention, org_cap, batch

    def sweep(self, now: datetime | None = None) -> int:
        """Delete rows past the retention, then each org's beyond its cap, a batch per
        transaction; returns how many went. Blocking: the server runs it in a thread."""
        before = (now or datetime.now(UTC)) - self.retention
        gone = self._until_done(lambda s: prune_old(s, self.model, before, self.batch))
        with self.db.session() as s:
            org_ids = [o.id for o in repo.list_orgs(s)]
        for org_id in org_ids:
            gone += self._until_done(functools.partial(self._prune_org, org_id))
        return gone

    def _prune_org(self, org_id: str, s: Session) -> int:
        return prune_org(s, self.model, org_id, self.org_cap, self.batch)

    def _until_done(self, prune: Callable[[Session], int]) -> int:
        gone = 0
        while True:
            with self.db.session() as s:
                n = prune(s)
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
                    log.info("%s: %d past their retention or their org's cap went", self.what, gone)
            except Exception:
                log.exception("%s: sweep failed", self.what)
            await asyncio.sleep(interval)
