"""Build contexts in flight on this server: each is read whole into memory (up to the context's
bound, 64 MiB) and unpacked before its build is queued, so how many are read at once is bounded
per org and in all, before a byte of one is read. An org's queued builds are bounded too, but
only once its context is unpacked (`templates.MAX_BUILDS_PER_ORG`): without this, one org's
hundred uploads at once held gigabytes."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from .errors import TooManyBuildsError

PER_ORG = 2  # contexts one org may have in flight at once (as many as its builds)
IN_ALL = 8  # ... every org's, on this server


class BuildUploads:
    def __init__(self, per_org: int = PER_ORG, in_all: int = IN_ALL) -> None:
        self.per_org, self.in_all = per_org, in_all
        self._by_org: Counter[str] = Counter()

    @contextlib.contextmanager
    def admitted(self, org_id: str) -> Iterator[None]:
        """One context of `org_id` read and unpacked in the block, or TooManyBuildsError (429)
        before anything is read."""
        if self._by_org[org_id] >= self.per_org:
            raise TooManyBuildsError(
                f"this org is sending {self.per_org} build contexts already, the most it may at "
                "once: wait for one to be taken"
            )
        if sum(self._by_org.values()) >= self.in_all:
            raise TooManyBuildsError(
                f"this server is taking {self.in_all} build contexts already: try again shortly"
            )
        self._by_org[org_id] += 1
        try:
            yield
        finally:
            self._by_org[org_id] -= 1
            if not self._by_org[org_id]:
                del self._by_org[org_id]
