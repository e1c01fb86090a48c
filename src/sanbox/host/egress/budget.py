"""The egress connections every computer's proxy may hold open at once, counted beyond the
computer (whose own cap is `proxy.MAX_CONNECTIONS`): per org, so one org's many computers cannot
take the server's sockets and file descriptors from the others, and in all. One
`ConnectionBudget` is shared by every computer's proxy of a gateway; a connection over it is
closed at accept and reported as a rate-limited denial, like one over the computer's cap.

The caps are fitted to the process's open-file limit (`fitted`): a relayed connection holds up
to `FDS_PER_CONNECTION` descriptors, and `FDS_KEPT` stay for the rest of the process (callers,
the database, VM monitors, agent links). A cap above what the limit allows would let one org's
connections, under its own cap, take every descriptor: accept() then fails for every computer's
egress, and for the API. `raise_open_file_limit` (the server's and a host agent's start) takes
the soft limit up to the hard one first."""

from __future__ import annotations

import contextlib
import logging
import resource
from collections import Counter

MAX_CONNECTIONS_PER_ORG = 4096  # SANBOX_EGRESS_MAX_CONNECTIONS_PER_ORG
MAX_CONNECTIONS_TOTAL = 16384  # SANBOX_EGRESS_MAX_CONNECTIONS_TOTAL
FDS_PER_CONNECTION = 8  # a spliced relay: two sockets, a duplicate of each, two pipes (2 fds each)
FDS_KEPT = 1024  # of the open-file limit, for everything but egress relays

log = logging.getLogger(__name__)


def raise_open_file_limit() -> int:
    """The soft limit on open files taken up to the hard one (often 1,024 and 524,288): every
    computer may hold hundreds of egress connections. The soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fitted(per_org: int, total: int, open_files: int | None = None) -> tuple[int, int]:
    """The caps (per org, in all) lowered to what `open_files` (default: this process's soft
    limit now) holds beside what the rest of the process keeps (`FDS_KEPT`, a quarter of a
    small limit), the org's cap by as much as the total's so that one org still cannot take
    it all; at least 1 each; lowered ones are logged."""
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files == resource.RLIM_INFINITY:
        return per_org, total
    kept = min(FDS_KEPT, open_files // 4)
    room = max(1, (open_files - kept) // FDS_PER_CONNECTION)
    if total <= room:
        return min(per_org, total), total
    log.warning(
        "egress connections capped at %d in all (not %d): the open-file limit is %d; "
        "raise it (LimitNOFILE=) for more",
        room,
        total,
        open_files,
    )
    return max(1, min(per_org, per_org * room // total)), room


class ConnectionBudget:
    """`take` a connection for an org (or learn why not), `give_back` it when it ends."""

    def __init__(
        self, per_org: int = MAX_CONNECTIONS_PER_ORG, total: int = MAX_CONNECTIONS_TOTAL
    ) -> None:
        self.per_org, self.total = per_org, total
        self._orgs: Counter[str] = Counter()
        self._open = 0

    @classmethod
    def within_open_files(cls, per_org: int, total: int) -> ConnectionBudget:
        """A budget of these caps, `fitted` to this process's open-file limit (raised first:
        `raise_open_file_limit`)."""
        return cls(*fitted(per_org, total, raise_open_file_limit()))

    def take(self, org: str) -> str | None:
        """Count one more connection of `org`; None if it may open, else why not (the count
        is unchanged then)."""
        if self._open >= self.total:
            return f"over the server's cap of {self.total} open egress connections"
        if self._orgs[org] >= self.per_org:
            return f"over the org's cap of {self.per_org} open egress connections"
        self._orgs[org] += 1
        self._open += 1
        return None

    def give_back(self, org: str) -> None:
        if self._orgs[org] <= 0:
            return
        self._orgs[org] -= 1
        self._open -= 1
        if not self._orgs[org]:
            del self._orgs[org]

    def open(self, org: str | None = None) -> int:
        """Connections open now, of `org` or in all."""
        return self._open if org is None else self._orgs.get(org, 0)
