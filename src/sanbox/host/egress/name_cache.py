"""What one computer's resolver remembers: the A records of the names it asked, each until its
TTL ends, the least recently used dropped first. Each computer has a cache of its own
(`Resolver.apart`), so a guest asking thousands of names under an allowed wildcard drops only
its own names, never a neighbour's, and cannot tell from how fast an answer comes whether
another computer asked a name.

Bounds, both the host's settings (`dns_bounds.py`): at most `size` names in one cache (`CACHE_NAMES`
by default), and at most `room.total` in all the caches sharing one `CacheRoom` (`HOST_CACHE_NAMES`
by default: a host's resolver and every computer's cache made from it). A cache at its own bound
drops its own oldest name to keep a new one; so does one when the host's total is reached, and a
cache that holds no name then keeps none (its answers still come, from upstream, under its DNS query
rate). Names whose TTL has passed are dropped when met: asked for, or at the front of the cache when
a new name comes; and once the host's total is reached, every cache's are swept (at most once
every `SWEEP_EVERY` seconds, and only when one may have passed), so the names of a computer that
stopped asking do not hold the host's bound past their TTL. A computer's names are all given
back when its egress stops (`close`).

Pure logic fed with times; the caller owns the clock."""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict

CACHE_NAMES = 1024  # names one computer's cache keeps (SANBOX_EGRESS_DNS_CACHE_NAMES)
HOST_CACHE_NAMES = 65_536  # ... all the caches of one host (SANBOX_EGRESS_DNS_HOST_CACHE_NAMES)
SWEEP_EVERY = 1.0  # seconds: a full host's caches are swept of names past their TTL at most so


class CacheRoom:
    """How many names the caches sharing it hold, and the most they may."""

    def __init__(self, total: int = HOST_CACHE_NAMES) -> None:
        if total < 0:
            raise ValueError("total must not be negative")
        self.total = total
        self.used = 0
        self._caches: weakref.WeakSet[NameCache] = weakref.WeakSet()
        self._soonest = math.inf  # no name of any of its caches expires before this
        self._swept = -math.inf

    def join(self, cache: NameCache) -> None:
        self._caches.add(cache)

    def noted(self, until: float) -> None:
        """A name kept until `until` in one of its caches."""
        self._soonest = min(self._soonest, until)

    def sweep(self, now: float) -> None:
        """Drop the names past their TTL from every cache sharing it (call when it is full), at
        most once every `SWEEP_EVERY` and only when one may have passed: one sweep reads every
        name, so a flood of short TTLs cannot make each new name read them all."""
        if now < self._soonest or now < self._swept + SWEEP_EVERY:
            return
        self._swept = now
        self._soonest = min((c.drop_expired(now) for c in list(self._caches)), default=math.inf)


class NameCache:
    def __init__(self, size: int = CACHE_NAMES, room: CacheRoom | None = None) -> None:
        if size < 0:
            raise ValueError("size must not be negative")
        self.size = size
        self.room = CacheRoom() if room is None else room
        self.room.join(self)
        self._names: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()  # name: expiry

    def __len__(self) -> int:
        return len(self._names)

    def get(self, name: str, now: float) -> list[str] | None:
        """The addresses kept for `name`, or None if none are kept (or their TTL has passed)."""
        entry = self._names.get(name)
        if entry is None:
            return None
        if entry[0] <= now:
            self._drop(name)
            return None
        self._names.move_to_end(name)
        return list(entry[1])

    def put(self, name: str, addresses: list[str], until: float, now: float) -> None:
        """Keep `addresses` for `name` until `until`, dropping this cache's own names to make
        room (first those whose TTL has passed, then the least recently used)."""
        if name in self._names:
            self._drop(name)
        if self.room.used >= self.room.total:  # names other computers no longer ask may go
            self.room.sweep(now)
        while self._names:
            oldest, (expiry, _) = next(iter(self._names.items()))
            if expiry > now and not self._full():
                break
            self._drop(oldest)
        if not self._full():
            self._names[name] = (until, list(addresses))
            self.room.used += 1
            self.room.noted(until)

    def drop_expired(self, now: float) -> float:
        """Drop every name whose TTL has passed; when the first of the rest expires (inf: none)."""
        for name in [n for n, (expiry, _) in self._names.items() if expiry <= now]:
            self._drop(name)
        return min((expiry for expiry, _ in self._names.values()), default=math.inf)

    def close(self) -> None:
        """Forget every name, giving their room back, and keep none from now on (a lookup
        still under way when the computer's egress stops must not take room for good)."""
        self.room.used -= len(self._names)
        self._names.clear()
        self.size = 0

    def _full(self) -> bool:
        return len(self._names) >= self.size or self.room.used >= self.room.total

    def _drop(self, name: str) -> None:
        del self._names[name]
        self.room.used -= 1
