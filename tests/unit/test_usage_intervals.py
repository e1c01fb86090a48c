"""The usage arithmetic, pure: clipping to [from, to), splitting at UTC midnights, sums by
computer, template and day, the CloudEvents rendering, counters read into an interval, and when
an open interval is cut."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sanbox.control.usage import cloudevents, intervals, ledger
from sanbox.control.usage.intervals import Interval
from sanbox.store.models import UsageRow

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)


def iv(state: str, start: float, end: float | None, **kw: object) -> Interval:
    """An interval from T0 + start to T0 + end (seconds)."""
    base: dict[str, object] = dict(
        computer="cmp_a",
        name="a",
        template="base",
        state=state,
        vcpus=2,
        memory_mib=1024,
        disk_gib=10,
        start=T0 + timedelta(seconds=start),
        end=None if end is None else T0 + timedelta(seconds=end),
    )
    return Interval(**{**base, **kw})  # type: ignore[arg-type]


def test_clip_keeps_the_part_inside_and_prorates_what_was_measured() -> None:
    whole = iv("running", 0, 100, cpu_seconds=50.0, egress_bytes=1000)
    part = whole.clip(T0 + timedelta(seconds=25), T0 + timedelta(seconds=75), T0)
    assert part is not None
    assert part.seconds(T0) == 50 and part.cpu_seconds == 25.0 and part.egress_bytes == 500
    assert whole.clip(T0 + timedelta(seconds=100), T0 + timedelta(seconds=200), T0) is None
    assert whole.clip(T0 - timedelta(seconds=10), T0, T0) is None  # [from, to): to excluded


def test_an_open_interval_counts_up_to_now() -> None:
    now = T0 + timedelta(seconds=30)
    part = iv("running", 0, None).clip(T0, T0 + timedelta(days=1), now)
    assert part is not None and part.seconds(now) == 30


def test_days_split_at_utc_midnight() -> None:
    parts = list(iv("stopped", 0, 7200).days(T0))  # 23:00 to 01:00
    assert [p.start.date().isoformat() for p in parts] == ["2026-12-01", "2026-12-02"]
    assert [p.seconds(T0) for p in parts] == [3600, 3600]


def test_totals_count_compute_only_with_a_vm_and_disk_in_every_state() -> None:
    found = [
        iv("creating", 0, 10),
        iv("running", 10, 70, cpu_seconds=12.0),
        iv("pausing", 70, 71),
        iv("paused", 71, 131),
        iv("resuming", 131, 132),
        iv("running", 132, 192),
        iv("stopping", 192, 193),
        iv("stopped", 193, 253),
    ]
    groups, total = intervals.group(found, T0, T0 + timedelta(days=1), "computer", T0)
    assert [g.key for g in groups] == ["cmp_a"]
    assert total.running_seconds == 120 and total.paused_seconds == 60
    assert total.compute_seconds == 10 + 60 + 1 + 1 + 60 + 1
    assert total.vcpu_seconds == 2 * total.compute_seconds
    assert total.memory_gib_seconds == 1 * total.compute_seconds
    assert total.disk_gib_seconds == 10 * 253
    assert total.cpu_seconds == 12.0 and total.egress_bytes is None  # never counted: None
    out = total.rounded()
    assert out["disk_gib_hours"] == round(10 * 253 / 3600, 6)
    assert out["states"] == {
        "creating": 10,
        "paused": 60,
        "pausing": 1,
        "resuming": 1,
        "running": 120,
        "stopped": 60,
        "stopping": 1,
    }


def test_unmeasured_stays_none_never_zero() -> None:
    _groups, total = intervals.group([iv("running", 0, 10)], T0, T0 + timedelta(1), "day", T0)
    assert total.cpu_seconds is None and total.rounded()["cpu_seconds"] is None


def test_group_by_template_and_day() -> None:
    found = [iv("running", 0, 7200), iv("running", 0, 60, computer="cmp_b", template="docker")]
    by_template, _ = intervals.group(found, T0, T0 + timedelta(days=2), "template", T0)
    assert [(g.key, g.totals.seconds) for g in by_template] == [("base", 7200), ("docker", 60)]
    by_day, total = intervals.group(found, T0, T0 + timedelta(days=2), "day", T0)
    assert [(g.key, g.totals.seconds) for g in by_day] == [
        ("2026-12-01", 3660),
        ("2026-12-02", 3600),
    ]
    assert total.seconds == 7260
    with pytest.raises(ValueError):
        intervals.group(found, T0, T0, "org", T0)


def test_a_cloudevent_is_deterministic_and_carries_the_sums() -> None:
    closed = cloudevents.Closed(7, 3, "acme", iv("running", 0, 60, cpu_seconds=1.5))
    ev = cloudevents.event(closed, "sanbox://host")
    assert ev["id"] == "cmp_a:3:2026-12-01T23:00:00.000000Z"
    assert ev["id"] == cloudevents.event(closed, "sanbox://other")["id"]
    assert ev["specversion"] == "1.0" and ev["subject"] == "acme" and ev["sequence"] == "7"
    assert ev["time"] == "2026-12-01T23:01:00.000000Z"
    data = ev["data"]
    assert data["duration_seconds"] == 60 and data["vcpu_seconds"] == 120
    assert data["memory_gib_seconds"] == 60 and data["disk_gib_seconds"] == 600
    assert data["cpu_used_seconds"] == 1.5 and data["egress_bytes"] is None
    paused = cloudevents.event(cloudevents.Closed(8, 4, "acme", iv("paused", 60, 120)), "s")
    assert paused["data"]["vcpu_seconds"] == 0 and paused["data"]["disk_gib_seconds"] == 600
    assert cloudevents.lines([closed, closed], "s").count("\n") == 2


def test_a_build_vms_interval_is_compute_but_no_computers_life() -> None:
    """A template build's VM: its vCPUs, memory and disk in the compute sums and in
    build_seconds, none of it in a computer's seconds or states; grouped under its template; its
    own CloudEvents type, its id under `build`."""
    build = iv("running", 0, 60, computer="bld-x", name="web", template="web", kind="build")
    groups, total = intervals.group(
        [build, iv("running", 0, 30)], T0, T0 + timedelta(1), "template", T0
    )
    web = next(g for g in groups if g.key == "web").totals
    assert (web.build_seconds, web.compute_seconds, web.vcpu_seconds) == (60, 60, 120)
    assert web.memory_gib_seconds == 60 and web.disk_gib_seconds == 600
    assert (web.seconds, web.running_seconds, web.states) == (0, 0, {})
    assert (total.seconds, total.build_seconds, total.compute_seconds) == (30, 60, 90)
    assert total.rounded()["build_seconds"] == 60
    ev = cloudevents.event(cloudevents.Closed(9, 1, "acme", build), "s")
    assert ev["type"] == "sanbox.build.usage" and ev["id"] == "bld-x:1:2026-12-01T23:00:00.000000Z"
    data = ev["data"]
    assert data["build"] == "bld-x" and "computer" not in data and data["template"] == "web"
    assert data["duration_seconds"] == 60 and data["vcpu_seconds"] == 120
    assert data["memory_gib_seconds"] == 60 and data["memory_mib"] == 1024


def test_a_snapshots_event_says_how_long_it_was_held() -> None:
    held = iv("ready", 0, 3600, computer="snp_a", kind="snapshot", size_bytes=2**30)
    data = cloudevents.event(cloudevents.Closed(1, 1, "acme", held), "s")["data"]
    assert data["duration_seconds"] == 3600 and data["snapshot_gib_seconds"] == 3600


def row(state: str, mark: int | None = None) -> UsageRow:
    return UsageRow(state=state, cpu_mark_usec=mark, started_at=T0, checked_at=T0)


def test_counters_are_read_from_their_marks_and_a_reset_counts_whole() -> None:
    r = row("running", mark=1_000_000)
    ledger.read_into(r, ledger.Reading(cpu_usec=3_000_000))
    assert r.cpu_seconds == 2.0 and r.cpu_mark_usec == 3_000_000
    ledger.read_into(r, ledger.Reading(cpu_usec=500_000))  # a new VM process: counted whole
    assert r.cpu_seconds == 2.5
    ledger.read_into(r, ledger.Reading())  # unmeasured: nothing changes
    assert r.cpu_seconds == 2.5
    booting = row("creating")  # a new VM's counter began at 0
    ledger.read_into(booting, ledger.Reading(cpu_usec=4_000_000))
    assert booting.cpu_seconds == 4.0
    unknown = row("running")  # no mark and not new: the first reading is only a mark
    ledger.read_into(unknown, ledger.Reading(cpu_usec=4_000_000))
    assert unknown.cpu_seconds is None and unknown.cpu_mark_usec == 4_000_000


def test_open_intervals_are_cut_every_period_running_and_at_hours_at_rest() -> None:
    now = T0 + timedelta(minutes=90)
    running = row("running")
    assert ledger.due_at(running, T0 + timedelta(seconds=59), 60) is None
    assert ledger.due_at(running, now, 60) == now
    stopped = row("stopped")
    assert ledger.due_at(stopped, T0 + timedelta(minutes=59), 60) is None
    assert ledger.due_at(stopped, now, 60) == datetime(2026, 12, 2, 0, 0, tzinfo=UTC)


def test_a_snapshot_counts_its_bytes_held_and_nothing_else() -> None:
    held = iv("ready", 0, 3600, kind="snapshot", size_bytes=2 * 2**30, vcpus=0, disk_gib=0)
    _groups, total = intervals.group([held], T0, T0 + timedelta(days=1), "template", T0)
    assert total.snapshot_gib_seconds == 2 * 3600 and total.rounded()["snapshot_gib_hours"] == 2
    assert total.seconds == 0 and total.disk_gib_seconds == 0  # not a computer's time
    ev = cloudevents.event(cloudevents.Closed(1, 1, "acme", held), "s")
    assert ev["type"] == "sanbox.snapshot.usage" and ev["data"]["snapshot_gib_seconds"] == 7200
