"""How fast one computer's guest may ask its DNS filter: a token bucket of `BURST` queries
refilled at `RATE` a second. Every query the guest sends, over UDP or TCP, takes one before it
is parsed or anything is asked upstream; a query that finds the bucket empty is answered
REFUSED at once (dns_filter.py says why REFUSED).

Without it the filter bounded only how many queries it answers at once, so a guest asking
thousands of distinct names under an allowed wildcard sent each of them upstream as fast as the
event loop turned: it could use up the packets per second a cloud resolver grants the host
(every computer on the host then gets SERVFAIL). 100 a second is far above what programs
resolve (a browser opening a heavy page asks some tens of names, most answered from its own
cache), and a burst of 200 lets a build that starts many downloads at once through. Both are
the defaults of the host's settings (`dns_bounds.py`).

Pure logic fed with times; the caller owns the clock."""

from __future__ import annotations

RATE = 100.0  # queries a second, sustained, per computer (SANBOX_EGRESS_DNS_RATE)
BURST = 200  # queries at once, per computer (SANBOX_EGRESS_DNS_BURST)


class QueryRate:
    def __init__(self, rate: float = RATE, burst: int = BURST) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive, burst at least 1")
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._at: float | None = None  # when `_tokens` was counted; None: never (full)

    def take(self, now: float) -> bool:
        """Whether a query arriving at `now` may be answered (it takes a token if so)."""
        if self._at is not None:
            elapsed = max(0.0, now - self._at)
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
