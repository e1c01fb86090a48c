"""The egress connections every computer's proxy may hold open at once, counted beyond the
computer (whose own cap is `proxy.MAX_CONNECTIONS`): per org, so one org's many computers cannot
take the server's sockets and file descriptors from the others, and in all. One
`ConnectionBudget` is shared by every computer's proxy of a gateway; a connection over it is
closed at accept and reported as a rate-limited denial, like one over the computer's cap."""

from __future__ import annotations

from collections import Counter

MAX_CONNECTIONS_PER_ORG = 4096  # SANBOX_EGRESS_MAX_CONNECTIONS_PER_ORG
MAX_CONNECTIONS_TOTAL = 16384  # SANBOX_EGRESS_MAX_CONNECTIONS_TOTAL


class ConnectionBudget:
    """`take` a connection for an org (or learn why not), `give_back` it when it ends."""

    def __init__(
        self, per_org: int = MAX_CONNECTIONS_PER_ORG, total: int = MAX_CONNECTIONS_TOTAL
    ) -> None:
        self.per_org, self.total = per_org, total
        self._orgs: Counter[str] = Counter()
        self._open = 0

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
