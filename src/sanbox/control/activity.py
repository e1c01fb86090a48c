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

    def touch(self, computer_id: str) -> None:
        now = self.clock()
        self._last[computer_id] = now
        if now - self._saved.get(computer_id, -SAVE_EVERY) >= SAVE_EVERY:
            self._saved[computer_id] = now
            with self.db.session() as s:
                repo.set_last_active(s, computer_id, datetime.now(UTC))

    def idle_for(self, computer_id: str) -> float:
        """Seconds since the computer's last activity."""
        last = self._last.get(computer_id)
        if last is None:  # not seen since this server started
            last = self._last[computer_id] = self._restored(computer_id)
        return self.clock() - last

    def forget(self, computer_id: str) -> None:
        self._last.pop(computer_id, None)
        self._saved.pop(computer_id, None)

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
