"""An API node's share of a bound held across the fleet (`fleet/node_share.py`): the bound over
the live nodes, rounded up, at least 1, never more than the bound; the rates and open-request
counts of one process hold that share, and the whole bound again once the other nodes are gone.
Fed with times: no sleeps."""

from __future__ import annotations

import pytest

from sanbox.api.open_requests import OpenCounts
from sanbox.control.errors import TooManyRequestsError
from sanbox.control.rates import KeyRates
from sanbox.fleet.node_share import NodeShare, rate_share, share

pytestmark = pytest.mark.unit


def test_a_share_is_the_bound_over_the_nodes_rounded_up() -> None:
    assert share(1024, 1) == 1024
    assert share(1024, 2) == 512
    assert share(1024, 3) == 342
    assert share(10, 4) == 3


def test_a_share_is_at_least_one_and_never_more_than_the_bound() -> None:
    assert share(1, 5) == 1  # a small bound stays usable on every node
    assert share(3, 100) == 1
    assert share(5, 0) == 5  # no count (yet): the whole bound, never more
    assert share(5, -3) == 5
    assert share(0, 3) == 0  # nothing allowed stays nothing
    for bound in range(1, 60):
        for nodes in range(1, 12):
            mine = share(bound, nodes)
            assert 1 <= mine <= bound
            assert bound <= mine * nodes < bound + nodes  # together: the bound, less one a node


def test_a_rate_is_split_evenly() -> None:
    assert rate_share(100.0, 1) == 100.0
    assert rate_share(100.0, 4) == 25.0
    assert rate_share(100.0, 0) == 100.0


def test_a_node_share_never_counts_fewer_than_this_node() -> None:
    held = NodeShare(0)
    assert held.nodes == 1 and held.of(7) == 7 and held.across() == ""
    held.set(3)
    assert held.of(7) == 3 and held.of_rate(9.0) == 3.0
    assert "3 API nodes" in held.across()
    held.set(0)
    assert held.nodes == 1


def test_a_key_rate_holds_its_share_and_gets_the_whole_back() -> None:
    held = NodeShare(2)
    rates = KeyRates(rate=4, burst=10, share=held)
    assert sum(rates.take("k", 0.0) is None for _ in range(20)) == 5  # half the burst
    assert rates.take("k", 0.0) == pytest.approx(0.5)  # half the rate: one in 0.5 s
    held.set(1)  # the other node is gone
    assert sum(rates.take("k", 100.0) is None for _ in range(20)) == 10


def test_open_requests_hold_their_share_per_key_and_per_org() -> None:
    held = NodeShare(2)
    counts = OpenCounts(per_key=4, per_org=6, share=held)
    for _ in range(2):
        counts.take("key_a", "org")
    with pytest.raises(TooManyRequestsError) as refused:
        counts.take("key_a", "org")
    assert "this API key has 2 requests open on this API node" in str(refused.value)
    assert "share of 4, 2 nodes" in str(refused.value)
    counts.take("key_b", "org")
    with pytest.raises(TooManyRequestsError, match="org's keys have 3"):
        counts.take("key_c", "org")
    held.set(1)
    counts.take("key_a", "org")  # the whole bound again
    assert counts.keys["key_a"] == 3
