"""What bounds one host's DNS, as its operator sets it: each computer's query rate
(`query_rate.py`: `rate` a second, bursts of `burst`; one bucket for its guest's queries to its
DNS filter, one for the questions its resolver sends upstream) and the cache sizes
(`name_cache.py`: `cache_names` names a computer, `host_cache_names` for all of them together).

Read from the environment by the server (`api/settings.py`) and by `sanbox host serve`
(`host/settings.py`): SANBOX_EGRESS_DNS_RATE, SANBOX_EGRESS_DNS_BURST,
SANBOX_EGRESS_DNS_CACHE_NAMES and SANBOX_EGRESS_DNS_HOST_CACHE_NAMES."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .name_cache import CACHE_NAMES, HOST_CACHE_NAMES
from .query_rate import BURST, RATE, QueryRate

MAX_RATE = 100_000.0  # queries a second: past any resolver a host may ask
MAX_NAMES = 10_000_000  # cached names, a host's: about 2 GB of cache at most


@dataclass(frozen=True)
class DnsBounds:
    rate: float = RATE  # queries a second, sustained, per computer
    burst: int = BURST  # queries at once, per computer
    cache_names: int = CACHE_NAMES  # names one computer's cache keeps
    host_cache_names: int = HOST_CACHE_NAMES  # names all of a host's caches keep, together

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and 0 < self.rate <= MAX_RATE):
            raise ValueError(f"the DNS query rate is above 0 and at most {MAX_RATE:g} a second")
        if not 1 <= self.burst <= MAX_RATE:
            raise ValueError(f"the DNS query burst is from 1 to {MAX_RATE:g}")
        if not 1 <= self.cache_names <= self.host_cache_names <= MAX_NAMES:
            raise ValueError(
                "a computer's DNS cache keeps from 1 name to the host's, which keeps at most "
                f"{MAX_NAMES:,}"
            )

    def query_rate(self) -> QueryRate:
        """A new bucket, full, for one computer."""
        return QueryRate(self.rate, self.burst)
