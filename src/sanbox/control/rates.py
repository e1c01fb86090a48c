"""Request rates per API key and per org: a token bucket per key id, so one tenant's key cannot
take the server for itself, and one per org id (`ORG_SHARE` keys' worth: an org may make any
number of keys, and E2B's envd calls carry a sandbox's token, not a key). A bucket holds up to
`burst` requests and refills at `rate` a second; a request takes one, and a key whose bucket is
empty is told how long until it holds one again. Pure logic fed with times; the caller owns the
clock.

With several API nodes each holds its share of the rate and the burst (`share`: the rate over
the live nodes, the burst likewise, rounded up), so a key or an org spread over the nodes gets
its rate once, not once per node (docs/fleet.md "Bounds across API nodes").

Memory is bounded: at most `capacity` buckets. A new key at capacity first drops the buckets
that have refilled (a full bucket is the same as none), then the one used longest ago (which only
ever gives that key a fresh burst)."""

from __future__ import annotations

from dataclasses import dataclass

from ..fleet.node_share import NodeShare

RATE = 100.0  # requests a second, sustained, per key (SANBOX_KEY_RATE)
BURST = 1000  # requests at once, per key (SANBOX_KEY_BURST)
CAPACITY = 10_000  # keys remembered
ORG_SHARE = 4  # an org's requests, all its keys' and its sandboxes' envd calls: 4 keys' worth


@dataclass
class _Bucket:
    tokens: float
    at: float  # when `tokens` was counted


class KeyRates:
    """`rate` and `burst` are the whole bound; `share` says how many API nodes hold it now."""

    def __init__(
        self,
        rate: float = RATE,
        burst: int = BURST,
        capacity: int = CAPACITY,
        *,
        share: NodeShare | None = None,
    ) -> None:
        if rate <= 0 or burst < 1 or capacity < 1:
            raise ValueError("rate must be positive, burst and capacity at least 1")
        self.rate, self.burst, self.capacity = rate, burst, capacity
        self.share = NodeShare() if share is None else share
        self._buckets: dict[str, _Bucket] = {}  # least recently used first

    def __len__(self) -> int:
        return len(self._buckets)

    def _level(self, bucket: _Bucket, now: float, rate: float, burst: int) -> float:
        return min(float(burst), bucket.tokens + max(0.0, now - bucket.at) * rate)

    def take(self, key_id: str, now: float) -> float | None:
        """Take one request from the key's bucket: None if it may go now, else the seconds until
        it may (nothing is taken then). The bucket holds this node's share."""
        rate, burst = self.share.of_rate(self.rate), self.share.of(self.burst)
        bucket = self._buckets.pop(key_id, None)
        if bucket is None:
            if len(self._buckets) >= self.capacity:
                self._make_room(now, rate, burst)
            bucket = _Bucket(float(burst), now)
        bucket.tokens, bucket.at = self._level(bucket, now, rate, burst), now
        self._buckets[key_id] = bucket  # re-inserted: the most recently used comes last
        if bucket.tokens < 1.0:
            return (1.0 - bucket.tokens) / rate
        bucket.tokens -= 1.0
        return None

    def _make_room(self, now: float, rate: float, burst: int) -> None:
        """Drop the buckets used longest ago (at the front) while they have refilled, then, while
        still full, the one used longest ago."""
        while self._buckets:
            key_id, bucket = next(iter(self._buckets.items()))
            if self._level(bucket, now, rate, burst) < burst and len(self._buckets) < self.capacity:
                return
            del self._buckets[key_id]
