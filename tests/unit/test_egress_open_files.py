"""The egress budget fitted to the process's open-file limit: a relayed connection holds up to 8
descriptors, so caps above what the limit holds would let one org's connections (under its own
cap) take every descriptor of the process, and every computer's egress and the API then fail
at accept()."""

from __future__ import annotations

import resource

import pytest

from sanbox.host.egress import budget
from sanbox.host.egress.budget import (
    FDS_KEPT,
    FDS_PER_CONNECTION,
    MAX_CONNECTIONS_PER_ORG,
    MAX_CONNECTIONS_TOTAL,
    ConnectionBudget,
    fitted,
)

pytestmark = pytest.mark.unit


def test_caps_fit_the_open_file_limit() -> None:
    # systemd's default soft limit: a quarter kept for the rest, 96 relays, an org a quarter
    assert fitted(MAX_CONNECTIONS_PER_ORG, MAX_CONNECTIONS_TOTAL, 1024) == (24, 96)
    # this machine's hard limit: 2,372 relays beside 1,024 kept descriptors
    per_org, total = fitted(MAX_CONNECTIONS_PER_ORG, MAX_CONNECTIONS_TOTAL, 20_000)
    assert total == (20_000 - FDS_KEPT) // FDS_PER_CONNECTION == 2372
    assert per_org == MAX_CONNECTIONS_PER_ORG * total // MAX_CONNECTIONS_TOTAL == 593
    assert total * FDS_PER_CONNECTION + FDS_KEPT <= 20_000
    # a limit that holds the caps leaves them; a tiny one still leaves one connection
    assert fitted(4096, 16384, 1 << 20) == (4096, 16384)
    assert fitted(4096, 16384, 8) == (1, 1)
    assert fitted(10, 5, 1 << 20) == (5, 5)


def test_a_budget_is_made_within_the_limit_it_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "raise_open_file_limit", lambda: 1024)
    made = ConnectionBudget.within_open_files(MAX_CONNECTIONS_PER_ORG, MAX_CONNECTIONS_TOTAL)
    assert (made.per_org, made.total) == (24, 96)
    for _ in range(24):
        assert made.take("org_a") is None
    assert made.take("org_a") is not None  # the org's share of what the process can hold
    assert made.take("org_b") is None


def test_the_soft_limit_goes_up_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert budget.raise_open_file_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] in (hard, max(soft, 1 << 20))
