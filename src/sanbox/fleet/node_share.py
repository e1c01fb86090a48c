"""An API node's share of a bound that holds across the fleet: an org's request rate and its open
requests are counted in each API process (no database round trip per request), so with N nodes
behind a load balancer each node enforces `ceil(bound / N)` of a count bound and `rate / N` of a
rate, N being the API nodes alive now (`fleet/api_nodes.py` counts them every few seconds; on
SQLite, one process, N stays 1: the whole bound). A share is never more than the whole bound and
never less than one (a small bound stays usable on every node), so the nodes together allow
less than the bound plus one per node. Pure arithmetic, and `NodeShare`: the count every bound of
this process reads."""

from __future__ import annotations

import math


def share(bound: int, nodes: int) -> int:
    """One node's part of a count bound held by `nodes` nodes together: `ceil(bound / nodes)`, at
    least 1 (0 where the bound is 0), never more than `bound`."""
    if bound <= 0:
        return bound
    return min(bound, max(1, math.ceil(bound / max(1, nodes))))


def rate_share(rate: float, nodes: int) -> float:
    """One node's part of a rate (a second) held by `nodes` nodes together: `rate / nodes`."""
    return rate / max(1, nodes)


class NodeShare:
    """How many API nodes share this process's bounds now (1 until the registry says more)."""

    def __init__(self, nodes: int = 1) -> None:
        self.nodes = max(1, nodes)

    def set(self, nodes: int) -> None:
        self.nodes = max(1, nodes)

    def of(self, bound: int) -> int:
        return bound if self.nodes == 1 else share(bound, self.nodes)  # per request: kept cheap

    def of_rate(self, rate: float) -> float:
        return rate if self.nodes == 1 else rate_share(rate, self.nodes)

    def across(self) -> str:
        """Said after a bound in an error: how it is shared now ('' on one node)."""
        return f", shared by {self.nodes} API nodes" if self.nodes > 1 else ""
