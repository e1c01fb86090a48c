"""Failed authentications per address: a burst is refused until its window passes, other
addresses are untouched, successes cost nothing, and memory stays bounded whatever the number of
addresses an attacker brings. Fed with times: no sleeps."""

from __future__ import annotations

import pytest

from sanbox.control.failures import FailureLimiter

pytestmark = pytest.mark.unit


def test_a_burst_is_refused_until_the_window_passes() -> None:
    limiter = FailureLimiter(limit=20, window=60)
    for i in range(19):
        limiter.failed("203.0.113.7", 100 + i * 0.1)
        assert limiter.retry_after("203.0.113.7", 100 + i * 0.1) is None
    limiter.failed("203.0.113.7", 102)
    assert limiter.retry_after("203.0.113.7", 102) == pytest.approx(58)
    assert limiter.retry_after("203.0.113.7", 159.9) == pytest.approx(0.1)
    assert limiter.retry_after("203.0.113.7", 160) is None  # the oldest failure left the window
    assert limiter.retry_after("198.51.100.1", 102) is None  # another address is not touched


def test_an_attacker_that_keeps_going_gets_one_try_per_failure_that_ages_out() -> None:
    limiter = FailureLimiter(limit=3, window=10)
    for t in (0, 1, 2):
        limiter.failed("a", t)
    assert limiter.retry_after("a", 5) == pytest.approx(5)
    limiter.failed("a", 10)  # let in at 10: the failure at 0 aged out; it fails again
    assert limiter.retry_after("a", 10) == pytest.approx(1)  # now the one at 1 must age out


def test_memory_is_bounded_by_addresses_and_by_failures_per_address() -> None:
    limiter = FailureLimiter(limit=5, window=60, capacity=100)
    for i in range(10_000):
        limiter.failed(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", 1.0)
    assert len(limiter) == 100
    for _ in range(1000):
        limiter.failed("one", 2.0)
    assert len(limiter._failures["one"]) == 5


def test_a_full_table_drops_addresses_whose_failures_aged_out_first() -> None:
    limiter = FailureLimiter(limit=2, window=60, capacity=3)
    limiter.failed("old", 0)
    limiter.failed("live1", 50)
    limiter.failed("live1", 51)
    limiter.failed("live2", 52)
    limiter.failed("new", 70)  # "old" aged out: it goes, the live ones stay
    assert set(limiter._failures) == {"live1", "live2", "new"}
    assert limiter.retry_after("live1", 70) == pytest.approx(40)


def test_bad_settings_are_refused() -> None:
    for kwargs in ({"limit": 0}, {"window": 0}, {"capacity": 0}):
        with pytest.raises(ValueError):
            FailureLimiter(**kwargs)
