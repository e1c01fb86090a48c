"""The deadline watcher wakes at the next deadline it knows of (at most its interval later, for
one set meanwhile), not a whole interval after it; a lifetime E2B's pause ended asks nothing while
the computer rests, and is given afresh when it comes up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sanbox.control.deadlines import (
    AFTER_WAKE,
    begin_again,
    due,
    ended_by_pause,
    fresh_lifetime,
    lifetime_over,
    next_wait,
)
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


def suspending(state: str, lifetime: int, age: float, ran_for: float | None = None) -> ComputerRow:
    r = row(state=state, lifetime=lifetime, age=age)
    r.on_lifetime = "suspend"
    if ran_for is not None:  # resumed since its creation: its run began that long before the end
        r.started_at = r.created_at + timedelta(seconds=lifetime - ran_for)
    return r


def test_a_lifetime_that_suspends_suspends_a_running_computer_only() -> None:
    act = due(suspending("running", 10, 12), NOW)
    assert act is not None and act[0] == "suspend"
    assert due(suspending("suspended", 10, 12), NOW) is None
    assert due(suspending("paused", 10, 12), NOW) is None
    assert due(suspending("running", 10, 5), NOW) is None


def test_a_computer_woken_after_its_lifetime_gets_it_again() -> None:
    # 5 minutes at least, counted from now; as long as its last run had, if longer
    assert fresh_lifetime(suspending("suspended", 10, 100), NOW) == 100 + AFTER_WAKE
    assert fresh_lifetime(suspending("suspended", 1000, 1100, ran_for=900), NOW) == 1100 + 900
    assert fresh_lifetime(suspending("suspended", 10, 5), NOW) is None  # not ended yet
    stopping = suspending("suspended", 10, 100)
    stopping.on_lifetime = "pause"
    assert fresh_lifetime(stopping, NOW) is None  # only a lifetime that suspends


def test_a_computer_woken_after_its_lifetime_gets_its_wake_lifetime() -> None:
    # E2B's create's timeout, however long its last run was (a set_timeout cut it short)
    cut_short = suspending("suspended", 1000, 1100, ran_for=1)
    cut_short.wake_lifetime = 900
    assert fresh_lifetime(cut_short, NOW) == 1100 + 900
    cut_short.wake_lifetime = 10  # 5 minutes at least, as E2B's floor
    assert fresh_lifetime(cut_short, NOW) == 1100 + AFTER_WAKE


def paused_by_e2b(state: str, lifetime: int, age: float) -> ComputerRow:
    """A computer whose lifetime E2B's pause ended (`deadlines.ended_by_pause`)."""
    r = row(state=state, lifetime=lifetime, age=age)
    r.on_lifetime = "delete"
    r.pause_ended_lifetime = True
    return r


@pytest.mark.parametrize("state", ["paused", "suspended", "stopped", "pausing", "error"])
def test_nothing_is_due_while_a_pause_that_ended_the_lifetime_rests(state: str) -> None:
    assert due(paused_by_e2b(state, 10, 100), NOW) is None
    unmarked = paused_by_e2b(state, 10, 100)
    unmarked.pause_ended_lifetime = False  # a pause through /v1: its lifetime counts at rest too
    act = due(unmarked, NOW)
    assert act is not None and act[0] == "delete"


def test_a_running_computer_s_lifetime_counts_whatever_the_mark() -> None:
    act = due(paused_by_e2b("running", 10, 100), NOW)
    assert act is not None and act[0] == "delete"


def test_a_pause_that_ends_the_lifetime_ends_it_at_once_and_gives_none() -> None:
    first_second = paused_by_e2b("paused", 1, 0.4)  # whole seconds: its end is still to come
    assert lifetime_over(first_second, NOW)
    assert ended_by_pause(row(lifetime=600, age=42.7), NOW) == {
        "lifetime": 42,
        "pause_ended_lifetime": True,
    }
    assert ended_by_pause(row(lifetime=600, age=0.2), NOW)["lifetime"] == 1
    assert ended_by_pause(row(lifetime=0, age=100), NOW) == {"pause_ended_lifetime": True}
    assert not lifetime_over(paused_by_e2b("paused", 0, 100), NOW)  # none given to one without


def test_a_computer_whose_lifetime_a_pause_ended_comes_up_with_a_fresh_one() -> None:
    marked = paused_by_e2b("resuming", 90, 100)
    marked.wake_lifetime = 900  # E2B's create's timeout
    begin_again(marked, NOW)
    assert (marked.lifetime, marked.pause_ended_lifetime) == (100 + 900, False)
    made_by_v1 = paused_by_e2b("resuming", 90, 100)  # ran 90 s until its pause
    begin_again(made_by_v1, NOW)
    assert made_by_v1.lifetime == 100 + AFTER_WAKE
    ran_an_hour = paused_by_e2b("resuming", 3600, 7200)  # created and started two hours ago
    begin_again(ran_an_hour, NOW)  # as long again as its last run had, from now
    assert (ran_an_hour.lifetime, ran_an_hour.started_at) == (7200 + 3600, NOW)
    kept = row(state="resuming", lifetime=50, age=100)  # /v1's pause: its lifetime as it is
    kept.on_lifetime = "delete"
    begin_again(kept, NOW)
    assert kept.lifetime == 50
