"""A computer's DNS query rate: a burst at once, then the sustained rate, refilled with time
(the clock is the caller's), never above the burst however long it waits."""

from __future__ import annotations

import pytest

from sanbox.host.egress.query_rate import BURST, RATE, QueryRate

pytestmark = pytest.mark.unit


def test_a_burst_then_the_rate() -> None:
    rate = QueryRate(rate=4.0, burst=5)
    assert [rate.take(100.0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert rate.take(100.125) is False  # half a token
    assert rate.take(100.25) is True  # one token a quarter of a second
    assert rate.take(100.25) is False


def test_a_long_wait_gives_a_burst_not_more() -> None:
    rate = QueryRate(rate=10.0, burst=5)
    assert all(rate.take(0.0) for _ in range(5))
    assert [rate.take(3600.0) for _ in range(6)] == [True] * 5 + [False]


def test_the_defaults_and_what_is_refused() -> None:
    rate = QueryRate()
    assert (rate.rate, rate.burst) == (RATE, BURST) == (100.0, 200)
    # a second's flood of 5000 queries: the burst and a second's rate get through
    through = sum(rate.take(i / 5000) for i in range(5000))
    assert BURST <= through <= BURST + RATE + 1
    with pytest.raises(ValueError):
        QueryRate(rate=0.0)
    with pytest.raises(ValueError):
        QueryRate(burst=0)
