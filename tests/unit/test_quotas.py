"""Quota arithmetic (pure): the first quota an operation would exceed, and the CLI's limits."""

from __future__ import annotations

import pytest

from sanbox.cli.grammars import parse_limit
from sanbox.control.quotas import Quota, Use, refusal

pytestmark = pytest.mark.unit


def test_no_quota_refuses_nothing() -> None:
    assert refusal("o", Quota(), Use(1000, 1000, 10**6, 10**6, 1000), Use(1, 64, 10**5)) is None


def test_the_first_quota_exceeded_is_named_with_limit_and_use() -> None:
    error = refusal("acme", Quota(running=5, vcpus=4), Use(2, 3, 1024), Use.computer(2, 512, 1))
    assert error is not None and error.code == "quota_exceeded" and error.status == 403
    assert (error.quota, error.limit, error.used) == ("vcpus", 4, 3)
    assert "sanbox org quota acme --vcpus N" in error.message


def test_exactly_at_the_limit_is_allowed_and_zero_allows_nothing() -> None:
    assert refusal("o", Quota(running=2), Use(running=1), Use(running=1)) is None
    assert refusal("o", Quota(snapshots=0), Use(), Use(snapshots=1)) is not None
    # a start adds no disk: a disk quota already full does not refuse it
    assert refusal("o", Quota(disk_gib=1), Use(disk_gib=5), Use(1, 1, 512)) is None


def test_cli_limits() -> None:
    assert parse_limit(None) == "" and parse_limit("none") is None and parse_limit("8") == 8
    with pytest.raises(ValueError):
        parse_limit("-3")
