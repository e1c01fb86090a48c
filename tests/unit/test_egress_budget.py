"""The egress connections counted beyond one computer: per org and in all, refused with a reason
that says which cap, and given back when they end."""

from __future__ import annotations

import pytest

from sanbox.host.egress.budget import ConnectionBudget

pytestmark = pytest.mark.unit


def test_an_org_over_its_cap_is_refused_and_the_others_go_on() -> None:
    budget = ConnectionBudget(per_org=2, total=10)
    assert budget.take("a") is None and budget.take("a") is None
    assert budget.take("a") == "over the org's cap of 2 open egress connections"
    assert budget.take("b") is None  # another org is untouched
    assert (budget.open("a"), budget.open("b"), budget.open()) == (2, 1, 3)
    budget.give_back("a")
    assert budget.take("a") is None


def test_the_server_cap_holds_whatever_the_org() -> None:
    budget = ConnectionBudget(per_org=10, total=3)
    for org in ("a", "b", "c"):
        assert budget.take(org) is None
    assert budget.take("d") == "over the server's cap of 3 open egress connections"
    assert budget.open() == 3 and budget.open("d") == 0  # a refusal counts nothing
    budget.give_back("b")
    assert budget.take("d") is None


def test_giving_back_more_than_was_taken_changes_nothing() -> None:
    budget = ConnectionBudget(per_org=1, total=1)
    budget.give_back("a")
    assert budget.open() == 0 and budget.take("a") is None and budget.open("a") == 1
