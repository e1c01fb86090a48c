"""A guest hammers the egress with denied attempts (the same name again and again, or 100,000
random names) to flood the log and the events table: a handful of reports get written, and each
says how many it stands for."""

from __future__ import annotations

import pytest

from sanbox.host.egress.denials import Denial, DenialLimiter

pytestmark = pytest.mark.unit


def test_one_report_per_denial_a_minute_then_the_count_of_the_rest() -> None:
    limiter = DenialLimiter()
    first = limiter.admit("x.example", 443, "not in the allowlist", 0.0)
    assert first == Denial("x.example", 443, "not in the allowlist")
    assert first.message() == "denied x.example:443: not in the allowlist"
    for i in range(57):
        assert limiter.admit("x.example", 443, "not in the allowlist", 1.0 + i) is None
    again = limiter.admit("x.example", 443, "not in the allowlist", 75.0)
    assert again is not None and again.repeats == 57 and again.quiet == 75.0
    assert again.message() == (
        "denied x.example:443: not in the allowlist (and 57 more like it in the last 75 s)"
    )
    assert again.data() == {
        "name": "x.example",
        "port": 443,
        "reason": "not in the allowlist",
        "repeats": 57,
        "others": 0,
    }
    assert limiter.admit("x.example", 443, "not in the allowlist", 76.0) is None


def test_another_port_or_reason_is_another_denial() -> None:
    limiter = DenialLimiter()
    assert limiter.admit("x.example", 443, "not in the allowlist", 0.0) is not None
    assert limiter.admit("x.example", 80, "not in the allowlist", 0.0) is not None
    assert limiter.admit("x.example", 443, "does not resolve", 0.0) is not None


def test_100000_random_names_write_60_reports_a_minute_and_count_the_rest() -> None:
    limiter = DenialLimiter()
    reports = [
        d
        for i in range(100_000)
        if (d := limiter.admit(f"n{i}.example", 53, "not in the allowlist", i * 0.0006)) is not None
    ]  # 100,000 names in one minute
    assert len(reports) == 60
    assert len(limiter) <= 1024  # the table of recent denials stays bounded
    late = limiter.admit("late.example", 53, "not in the allowlist", 61.0)
    assert late is not None and late.others == 100_000 - 60
    assert late.message().endswith("; 99940 other denials were not recorded")
    assert limiter.admit("later.example", 53, "not in the allowlist", 61.5) is not None
    assert limiter.admit("later.example", 53, "not in the allowlist", 62.0) is None


def test_the_cap_holds_back_known_denials_and_counts_them_as_repeats() -> None:
    limiter = DenialLimiter(per_key=1.0, per_window=2, window=60.0)
    assert limiter.admit("a", 1, "r", 0.0) and limiter.admit("b", 1, "r", 0.0)
    assert limiter.admit("a", 1, "r", 5.0) is None  # over the cap: counted for "a"
    a = limiter.admit("a", 1, "r", 60.0)
    assert a is not None and a.repeats == 1 and a.others == 0


def test_forgotten_denials_keep_their_count() -> None:
    limiter = DenialLimiter(max_keys=2)
    assert limiter.admit("a", 1, "r", 0.0) is not None
    assert limiter.admit("a", 1, "r", 1.0) is None  # one repeat held for "a"
    assert limiter.admit("b", 1, "r", 2.0) is not None
    assert limiter.admit("c", 1, "r", 3.0) is not None  # "a" is forgotten, its repeat is not
    d = limiter.admit("d", 1, "r", 4.0)
    assert d is not None and d.others == 1 and len(limiter) == 2
