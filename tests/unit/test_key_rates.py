"""Request rates per key: a burst is allowed, then the sustained rate, a key over it is told how
long to wait and others are untouched; memory stays bounded whatever the number of keys. Fed with
times: no sleeps."""

from __future__ import annotations

import pytest

from sanbox.control.rates import KeyRates

pytestmark = pytest.mark.unit


def test_a_burst_then_the_sustained_rate() -> None:
    rates = KeyRates(rate=4, burst=5)
    assert all(rates.take("key_a", 100.0) is None for _ in range(5))
    assert rates.take("key_a", 100.0) == pytest.approx(0.25)  # empty: one token in 0.25 s
    assert rates.take("key_b", 100.0) is None  # another key has its own bucket
    assert rates.take("key_a", 100.25) is None  # refilled by one
    assert rates.take("key_a", 100.25) is not None
    assert all(rates.take("key_a", 200.0) is None for _ in range(5))  # refilled to the burst only
    assert rates.take("key_a", 200.0) is not None


def test_a_refused_request_takes_nothing() -> None:
    rates = KeyRates(rate=1, burst=1)
    assert rates.take("k", 0.0) is None
    for _ in range(100):  # hammering while empty does not push the next token further away
        assert rates.take("k", 0.5) == pytest.approx(0.5)
    assert rates.take("k", 1.0) is None


def test_memory_stays_bounded_and_a_busy_key_keeps_its_bucket() -> None:
    rates = KeyRates(rate=1, burst=3, capacity=100)
    for _ in range(3):
        rates.take("busy", 0.0)
    for i in range(10_000):
        rates.take(f"key_{i}", 0.0)
        if i % 50 == 0:
            rates.take("busy", 0.0)  # recently used: not the one pushed out
        assert len(rates) <= 100
    assert rates.take("busy", 0.0) is not None  # still empty: its bucket was kept


def test_bad_bounds_are_refused() -> None:
    for rate, burst, capacity in ((0.0, 1, 1), (1.0, 0, 1), (1.0, 1, 0)):
        with pytest.raises(ValueError):
            KeyRates(rate, burst, capacity)
