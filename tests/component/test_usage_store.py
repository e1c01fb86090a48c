"""Usage intervals on a real SQLite store: an egress counter that outlives a pause (the proxy
stays up while the computer is paused) is counted once, not again at every resume; a transition
recorded while its VM was not seen (its fleet host silent) ends the interval where it was last
seen and the next begins there, no time between; a period asked for in another zone than UTC
compares the same instants as in UTC. (The whole metering through
the API: test_usage.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select

from sanbox.control.usage.ledger import Ledger, Reading
from sanbox.store import Database, repo
from sanbox.store.models import ComputerRow, UsageRow

pytestmark = pytest.mark.component


def test_egress_carried_across_a_pause_is_counted_once(db: Database) -> None:
    carried = {"bytes": 0}  # the computer's egress proxy's counter: it lives across a pause
    Ledger(lambda _cid: Reading(egress_bytes=carried["bytes"])).install(db)
    with db.session() as s:
        org = repo.create_org(s, "default")
        s.add(
            ComputerRow(
                id="cmp_a",
                org_id=org.id,
                name="a",
                template="base",
                state="creating",
                vcpus=1,
                memory_mib=512,
                disk_gib=1,
            )
        )
    steps = ["running", "pausing", "paused", "resuming", "running", "pausing", "paused"]
    steps += ["resuming", "running", "stopping", "stopped"]
    for state in steps:
        if state == "running" and carried["bytes"] == 0:
            carried["bytes"] = 1000  # sent once, in the first running interval
        with db.session() as s:
            row = s.get(ComputerRow, "cmp_a")
            assert row is not None
            row.state = state
    with db.session() as s:
        total = s.scalar(select(func.sum(UsageRow.egress_bytes)).where(UsageRow.kind == "computer"))
    assert total == 1000


def test_a_transition_while_unseen_leaves_no_time_between(db: Database) -> None:
    seen_at: dict[str, datetime] = {}  # the meter's word: where the VM was last seen

    def last_seen(cid: str, _host: str | None, _i: UsageRow, _now: datetime) -> datetime | None:
        return seen_at.get(cid)

    Ledger(last_seen=last_seen).install(db)
    with db.session() as s:
        org = repo.create_org(s, "default")
        s.add(
            ComputerRow(
                id="cmp_u",
                org_id=org.id,
                name="u",
                template="base",
                state="running",
                vcpus=1,
                memory_mib=512,
                disk_gib=1,
            )
        )
    with db.session() as s:
        running = s.scalars(select(UsageRow).where(UsageRow.computer_id == "cmp_u")).one()
        seen_at["cmp_u"] = running.started_at + timedelta(milliseconds=1)
    with db.session() as s:  # recorded in error while its host is silent
        row = s.get(ComputerRow, "cmp_u")
        assert row is not None
        row.state = "error"
    with db.session() as s:
        first, after = s.scalars(
            select(UsageRow).where(UsageRow.computer_id == "cmp_u").order_by(UsageRow.ordinal)
        ).all()
    assert _aware(first.ended_at) == _aware(seen_at["cmp_u"])  # where it was last seen
    assert (after.state, _aware(after.started_at)) == ("error", _aware(first.ended_at))


def _aware(t: datetime | None) -> datetime | None:
    return None if t is None else t.replace(tzinfo=t.tzinfo or UTC)


def test_a_time_in_another_zone_is_compared_as_the_same_instant(db: Database) -> None:
    at = datetime(2026, 1, 5, 13, 0, tzinfo=UTC)
    with db.session() as s:
        s.add(
            UsageRow(
                org_id="org_x",
                computer_id="cmp_x",
                ordinal=1,
                name="x",
                template="base",
                state="running",
                vcpus=1,
                memory_mib=512,
                disk_gib=1,
                started_at=at,
                checked_at=at,
            )
        )
    plus_two = timezone(timedelta(hours=2))
    for before in (
        datetime(2026, 1, 5, 12, 30, tzinfo=UTC),
        datetime(2026, 1, 5, 14, 30, tzinfo=plus_two),
    ):
        with db.session() as s:
            found = s.scalars(select(UsageRow).where(UsageRow.started_at < before)).all()
        assert found == [], f"an interval from 13:00Z began before {before.isoformat()}"
