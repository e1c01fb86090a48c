"""Usage reads run in worker threads, a bounded number at once. A report sums an org's intervals
over up to 400 days (twenty computers running make 864,000 a month): seconds of the database's
time, which on the event loop would stall every other request of every org. In a thread it
stalls nothing, but threads are few (the loop's default pool: the CPUs + 4), so an org may have
`PER_ORG` reads under way and the server `TOTAL`; past either, the next is refused 429
`too_many_usage_reports` (with `Retry-After`) before it reads anything.

A place is given back when its read has ended in its thread, not when its caller stops waiting
(a client that went away): a read cannot be stopped midway, and the threads it holds are what
the bound counts. The table runs on the event loop only, so it needs no lock."""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Callable
from typing import TypeVar

from ..errors import TooManyRequestsError

PER_ORG = 2  # usage reads under way at once for one org (SANBOX_USAGE_REPORTS_PER_ORG)
TOTAL = 4  # ... and for every org (SANBOX_USAGE_REPORTS_TOTAL)
RETRY_AFTER = 2  # seconds a refused caller is told to wait
CODE = "too_many_usage_reports"

T = TypeVar("T")


class ReportSlots:
    def __init__(self, per_org: int = PER_ORG, total: int = TOTAL) -> None:
        if per_org < 1 or total < 1:
            raise ValueError("usage reports at once: at least 1 per org and 1 in all")
        self.per_org, self.total = per_org, total
        self._open: collections.Counter[str] = collections.Counter()
        self._reads: set[asyncio.Task[object]] = set()

    def open(self, org_id: str | None = None) -> int:
        """Reads under way: the org's, or every org's."""
        return self._open[org_id] if org_id is not None else len(self._reads)

    async def run(self, org_id: str, read: Callable[[], T]) -> T:
        """`read()` in a worker thread, in one of the org's places (TooManyRequestsError if none
        is left, before it starts)."""
        if len(self._reads) >= self.total:
            raise _refused(f"the server has {self.total} usage reports under way")
        if self._open[org_id] >= self.per_org:
            raise _refused(f"this org has {self.per_org} usage reports under way")
        self._open[org_id] += 1
        task: asyncio.Task[T] = asyncio.ensure_future(asyncio.to_thread(read))
        self._reads.add(task)
        task.add_done_callback(functools.partial(self._ended, org_id))
        return await asyncio.shield(task)  # a caller that goes away leaves the read its place

    def _ended(self, org_id: str, task: asyncio.Task[T]) -> None:
        self._reads.discard(task)
        self._open[org_id] -= 1
        if self._open[org_id] <= 0:
            del self._open[org_id]
        if not task.cancelled():
            task.exception()  # seen: a caller that went away no longer waits for it


def _refused(why: str) -> TooManyRequestsError:
    return TooManyRequestsError(
        f"{why}, the most at once: try again in a few seconds", RETRY_AFTER, CODE
    )
