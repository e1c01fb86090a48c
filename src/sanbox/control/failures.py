"""Failed authentications, counted per client address: after `limit` failures within `window`
seconds an address is refused until the oldest of them is older than the window. Pure logic fed
with times; the caller owns the clock.

Memory is bounded: at most `limit` times per address and `capacity` addresses. A new address at
capacity first drops the addresses whose failures are all past the window, then the one seen
longest ago (so many addresses can push one out of memory: a cap has that price). Successes
are not counted and cost nothing here.
"""

from __future__ import annotations

from collections import deque

LIMIT = 20  # failures ...
WINDOW = 60.0  # ... within this many seconds
CAPACITY = 10_000  # addresses remembered


class FailureLimiter:
    def __init__(
        self, limit: int = LIMIT, window: float = WINDOW, capacity: int = CAPACITY
    ) -> None:
        if limit < 1 or window <= 0 or capacity < 1:
            raise ValueError("limit and capacity must be at least 1, window positive")
        self.limit, self.window, self.capacity = limit, window, capacity
        self._failures: dict[str, deque[float]] = {}  # oldest address first

    def __len__(self) -> int:
        return len(self._failures)

    def retry_after(self, address: str, now: float) -> float | None:
        """Seconds until `address` may try again, or None if it may now."""
        times = self._failures.get(address)
        if times is None or len(times) < self.limit:
            return None
        wait = times[0] + self.window - now
        return wait if wait > 0 else None

    def failed(self, address: str, now: float) -> None:
        times = self._failures.pop(address, None)
        if times is None:
            if len(self._failures) >= self.capacity:
                self._make_room(now)
            times = deque(maxlen=self.limit)
        times.append(now)
        self._failures[address] = times  # re-inserted: the most recently seen comes last

    def _make_room(self, now: float) -> None:
        """Drop the addresses whose failures are all past the window (the ones seen longest ago,
        so at the front), then, while still full, the one seen longest ago."""
        while self._failures:
            address, times = next(iter(self._failures.items()))
            if times[-1] + self.window > now and len(self._failures) < self.capacity:
                return
            del self._failures[address]
