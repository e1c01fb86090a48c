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
a new name comes. A computer's names are all given back when its egress stops (`close`).

Pure logic fed with times; the caller owns the clock."""

from __future__ import annotations

from collections import OrderedDict

CACHE_NAMES = 1024  # names one computer's cache keeps (SANBOX_EGRESS_DNS_CACHE_NAMES)
HOST_CACHE_NAMES = 65_536  # ... all the caches of one host (SANBOX_EGRESS_DNS_HOST_CACHE_NAMES)


class CacheRoom:
    """How many names the caches sharing it hold, and the most they may."""

    def __init__(self, total: int = HOST_CACHE_NAMES) -> None:
        if total < 0:
            raise ValueError("total must not be negative")
        self.total = total
        self.used = 0


class NameCache:
    def __init__(self, size: int = CACHE_NAMES, room: CacheRoom | None = None) -> None:
        if size < 0:
            raise ValueError("size must not be negative")
        self.size = size
        self.room = CacheRoom() if room is None else room
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
        while self._names:
            oldest, (expiry, _) = next(iter(self._names.items()))
            if expiry > now and not self._full():
                break
            self._drop(oldest)
        if not self._full():
            self._names[name] = (until, list(addresses))
            self.room.used += 1

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
