"""Usage intervals on PostgreSQL with two writers, as two API nodes are: a transition that waits
for the meter's cut of the same open interval finds the continuation the cut opened and closes
that one, so a computer keeps one open interval and its intervals tile its life (before, it found
none, opened a second, and the orphan was cut as running forever, after the computer's delete
too); and an upgrade to 0026 closes such orphans where they were last seen to hold, the newest
kept open, before the one-open-interval index guards it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest
from alembic import command
from sqlalchemy import Table, insert, select, text

from sanbox.control.usage import ledger
from sanbox.control.usage.ledger import Ledger, Reading
from sanbox.store import Database, repo
from sanbox.store.db import alembic_config
from sanbox.store.models import ComputerRow, UsageRow

from .conftest import clean_pg

pytestmark = pytest.mark.component


@pytest.fixture
def pg() -> Iterator[Database]:
    db = Database(clean_pg())
    yield db
    db.close()


_RECORD = {
    "id": "cmp_race",
    "name": "race",
    "template": "base",
    "state": "running",
    "vcpus": 1,
    "memory_mib": 512,
    "disk_gib": 1,
}


def _computer(db: Database) -> None:
    with db.session() as s:
        org = repo.create_org(s, "default")
        s.add(ComputerRow(org_id=org.id, **_RECORD))


def _computer_at_0025(db: Database) -> None:
    """Its record in a schema at migration 0025, with the columns it has then (the model's later
    ones are not in the table yet), and no ledger: its intervals are written by hand."""
    with db.session() as s:
        org = repo.create_org(s, "default")
        table = cast(Table, ComputerRow.__table__)
        s.execute(insert(table).values(org_id=org.id, **_RECORD))


def _intervals(db: Database) -> list[UsageRow]:
    with db.session() as s:
        q = select(UsageRow).where(UsageRow.computer_id == "cmp_race")
        return list(s.scalars(q.order_by(UsageRow.started_at, UsageRow.id)))


def _waiting_on_a_lock(db: Database) -> bool:
    with db.engine.connect() as conn:
        q = text("select count(*) from pg_stat_activity where wait_event_type = 'Lock'")
        return bool(conn.execute(q).scalar())


def test_a_transition_waiting_for_the_meters_cut_keeps_one_open_interval(pg: Database) -> None:
    pg.migrate()
    Ledger().install(pg)
    _computer(pg)
    locked, failures = threading.Event(), []

    def meter() -> None:  # the meter's cut: the open intervals locked, then each rotated
        try:
            with pg.session() as s:
                q = select(UsageRow).where(UsageRow.ended_at.is_(None)).with_for_update()
                rows = s.scalars(q).all()
                locked.set()
                deadline = time.monotonic() + 20
                while not _waiting_on_a_lock(pg):  # the transition waits for this lock
                    assert time.monotonic() < deadline, "the transition never waited"
                    time.sleep(0.01)
                for row in rows:
                    ledger.rotate(s, row, ledger.db_now(s), Reading())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    def transition() -> None:  # another node stops the computer meanwhile
        locked.wait(20)
        with pg.session() as s:
            row = s.get(ComputerRow, "cmp_race")
            assert row is not None
            row.state = "stopping"

    threads = [threading.Thread(target=meter), threading.Thread(target=transition)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, failures
    rows = _intervals(pg)
    assert [r.state for r in rows] == ["running", "running", "stopping"]
    assert [r.ended_at is None for r in rows] == [False, False, True]
    assert [r.started_at for r in rows[1:]] == [r.ended_at for r in rows[:-1]], "no tiling"


def test_upgrade_closes_extra_open_intervals_where_last_seen(pg: Database) -> None:
    with pg.engine.begin() as conn:
        cfg = alembic_config(pg.url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0025")
    _computer_at_0025(pg)  # the intervals are written by hand, as a race left them
    with pg.session() as s:
        for ordinal, checked in ((1, "2026-12-01 10:00:00"), (2, "2026-12-01 10:05:00")):
            s.execute(
                text(
                    "insert into usage_intervals (kind, org_id, computer_id, ordinal, name, "
                    "template, state, vcpus, memory_mib, disk_gib, started_at, checked_at, "
                    "size_bytes) select 'computer', org_id, id, :n, name, template, 'running', "
                    "1, 512, 1, '2026-12-01 09:00:00+00', :checked, 0 from computers"
                ),
                {"n": ordinal, "checked": checked + "+00"},
            )
    pg.migrate()
    rows = _intervals(pg)
    assert [(r.ordinal, r.ended_at is None) for r in rows] == [(1, False), (2, True)]
    assert rows[0].ended_at == rows[0].checked_at and rows[0].seq is not None
