"""Usage intervals on a real SQLite store: an egress counter that outlives a pause (the proxy
stays up while the computer is paused) is counted once, not again at every resume; a period asked
for in another zone than UTC compares the same instants as in UTC. (The whole metering through
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
