"""When each computer was last used, for the idle watcher. Kept in memory on the monotonic clock,
and stored on the computer's record at most every `SAVE_EVERY` seconds, so a restarted server
picks the clocks up where they were instead of giving every computer a fresh idle timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from ..store import Database, repo

SAVE_EVERY = 30.0  # seconds: how far behind the stored time may be


class ActivityClocks:
    def __init__(self, db: Database, clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.clock = clock
        self._last: dict[str, float] = {}  # computer id -> clock time of its last activity
        self._saved: dict[str, float] = {}  # computer id -> clock time it was last stored
        self._wrote: dict[str, datetime] = {}  # computer id -> the time this node last stored

    def touch(self, computer_id: str) -> None:
        now = self.clock()
        self._last[computer_id] = now
        if now - self._saved.get(computer_id, -SAVE_EVERY) >= SAVE_EVERY:
            self._saved[computer_id] = now
            self._wrote[computer_id] = wall = datetime.now(UTC)
            with self.db.session() as s:
                repo.set_last_active(s, computer_id, wall)

    def idle_for(self, computer_id: str) -> float:
        """Seconds since the computer's last activity."""
        last = self._last.get(computer_id)
        if last is None:  # not seen since this server started
            last = self._last[computer_id] = self._restored(computer_id)
        return self.clock() - last

    def idle_by_record(self, computer_id: str, stored: datetime | None) -> float | None:
        """Seconds idle by the record's last use when another API node stored it (a time this
        node did not write), counted from SAVE_EVERY later than it says (never early); None when
        the record holds nothing newer than this node's own clock knows."""
        if stored is None:
            return None
        mine = self._wrote.get(computer_id)
        if mine is not None and stored <= mine:
            return None
        return (datetime.now(UTC) - stored).total_seconds() - SAVE_EVERY

    def forget(self, computer_id: str) -> None:
        self._last.pop(computer_id, None)
        self._saved.pop(computer_id, None)
        self._wrote.pop(computer_id, None)

    def _restored(self, computer_id: str) -> float:
        """The stored time on this clock, moved later by what it may lag (so a computer is never
        suspended early); now if none is stored."""
        now = self.clock()
        with self.db.session() as s:
            row = repo.computer_by_id(s, computer_id)
        if row is None or row.last_active_at is None:
            return now
        ago = (datetime.now(UTC) - row.last_active_at).total_seconds() - SAVE_EVERY
        return now - max(0.0, ago)
