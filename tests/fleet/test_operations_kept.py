"""Finished operations are swept after their retention (before, a row per verb stayed for good:
a tenant's loop of verbs, or a host made to be settled again and again, grew the table without
end): done, failed and abandoned ones finished longer ago go, a batch a transaction; a recent
one stays, and an incomplete one never goes however old, so the guard of one incomplete
operation per computer is untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from sanbox.api.settings import ServerSettings
from sanbox.control.retention import FinishedOperations
from sanbox.fleet.errors import BusyError
from sanbox.fleet.operations import Operations
from sanbox.store import Database
from sanbox.store.fleet_models import OperationRow

pytestmark = pytest.mark.fleet


def _finished_days_ago(db: Database, op_id: str, days: float) -> None:
    when = datetime.now(UTC) - timedelta(days=days)
    with db.engine.begin() as conn:
        conn.execute(
            update(OperationRow)
            .where(OperationRow.op_id == op_id)
            .values(started_at=when, finished_at=when)
        )


def test_finished_operations_past_their_retention_go_and_incomplete_ones_stay(
    any_db: Database,
) -> None:
    ops = Operations(any_db)
    old = []
    for n in range(5):  # more than a batch: swept in several transactions
        op = ops.begin(f"cmp_old{n}", "start")
        ops.finish(op.op_id, error="the host refused" if n % 2 else None)
        _finished_days_ago(any_db, op.op_id, 8)
        old.append(op.op_id)
    left = ops.begin("cmp_left", "stop", node="node-gone")
    ops.abandon_node("node-gone")
    _finished_days_ago(any_db, left.op_id, 30)
    recent = ops.begin("cmp_recent", "pause")
    ops.finish(recent.op_id)
    _finished_days_ago(any_db, recent.op_id, 6)
    running = ops.begin("cmp_running", "snapshot")  # begun long ago, not finished
    with any_db.engine.begin() as conn:
        conn.execute(
            update(OperationRow)
            .where(OperationRow.op_id == running.op_id)
            .values(started_at=datetime.now(UTC) - timedelta(days=30))
        )

    gone = FinishedOperations(any_db, timedelta(days=7), batch=2).sweep()

    assert gone == len(old) + 1
    with any_db.session() as s:
        kept = set(s.scalars(select(OperationRow.op_id)))
    assert kept == {recent.op_id, running.op_id}
    with pytest.raises(BusyError):  # the incomplete one still holds its computer
        ops.begin("cmp_running", "stop")
    assert FinishedOperations(any_db, timedelta(days=7), batch=2).sweep() == 0


def test_the_retention_of_finished_operations_is_a_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SANBOX_OPERATION_RETENTION_DAYS", raising=False)
    assert ServerSettings.from_env().operation_retention_days == 7.0
    monkeypatch.setenv("SANBOX_OPERATION_RETENTION_DAYS", "0.5")
    assert ServerSettings.from_env().operation_retention_days == 0.5
