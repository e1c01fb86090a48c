"""The deadline watcher wakes at the next deadline it knows of (at most its interval later, for
one set meanwhile), not a whole interval after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sanbox.control.deadlines import due, next_wait
from sanbox.store.models import ComputerRow

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def row(
    state: str = "running", lifetime: int = 0, max_running: int = 0, age: float = 0.0
) -> ComputerRow:
    at = NOW - timedelta(seconds=age)
    return ComputerRow(
        state=state,
        lifetime=lifetime,
        on_lifetime="stop",
        max_running=max_running,
        created_at=at,
        started_at=at,
    )


def test_it_wakes_at_the_first_deadline_to_come() -> None:
    rows = [row(lifetime=10, age=9.7), row(max_running=5, age=4.5), row(lifetime=60)]
    assert next_wait(rows, NOW, 2.0) == pytest.approx(0.3)


def test_no_deadline_or_a_far_one_waits_its_interval() -> None:
    assert next_wait([], NOW, 2.0) == 2.0
    assert next_wait([row(lifetime=600)], NOW, 2.0) == 2.0


def test_a_passed_deadline_is_not_waited_for_again() -> None:
    # Due now (and acted on, or busy and tried again next round): not a zero wait, a busy loop.
    passed = row(lifetime=5, age=8)
    assert due(passed, NOW) is not None
    assert next_wait([passed], NOW, 2.0) == 2.0
    assert next_wait([passed, row(lifetime=10, age=9.99)], NOW, 2.0) == pytest.approx(0.05)


def test_a_stopped_computer_has_no_running_deadline() -> None:
    assert next_wait([row(state="stopped", max_running=5, age=4)], NOW, 2.0) == 2.0
