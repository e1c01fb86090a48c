"""Idle clocks on a real SQLite store: stored at most every 30 s, and picked up by a restarted
server so that a computer is neither given a fresh timeout nor suspended early."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sanbox.control.activity import SAVE_EVERY, ActivityClocks
from sanbox.store import Database, repo
from sanbox.store.models import ComputerRow

pytestmark = pytest.mark.component


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'sanbox.db'}")
    database.migrate()
    with database.session() as s:
        org = repo.create_org(s, "default")
        s.add(
            ComputerRow(
                id="cmp_a",
                org_id=org.id,
                name="a",
                template="base",
                state="running",
                vcpus=1,
                memory_mib=512,
                disk_gib=1,
            )
        )
    return database


def stored(db: Database) -> datetime | None:
    with db.session() as s:
        row = repo.computer_by_id(s, "cmp_a")
        assert row is not None
        return row.last_active_at


def test_touches_are_stored_at_most_every_save_interval(db: Database) -> None:
    now = [100.0]
    clocks = ActivityClocks(db, clock=lambda: now[0])
    clocks.touch("cmp_a")
    first = stored(db)
    assert first is not None and datetime.now(UTC) - first < timedelta(seconds=5)
    now[0] += SAVE_EVERY / 2
    clocks.touch("cmp_a")
    assert stored(db) == first  # not written again so soon
    assert clocks.idle_for("cmp_a") == 0.0
    now[0] += SAVE_EVERY
    clocks.touch("cmp_a")
    assert stored(db) != first
    now[0] += 7
    assert clocks.idle_for("cmp_a") == 7


def test_a_restarted_server_picks_the_clock_up(db: Database) -> None:
    assert ActivityClocks(db).idle_for("cmp_a") < 1  # nothing stored: idle from now
    with db.session() as s:
        repo.set_last_active(s, "cmp_a", datetime.now(UTC) - timedelta(seconds=300))
    idle = ActivityClocks(db).idle_for("cmp_a")
    assert 300 - SAVE_EVERY - 2 < idle < 300 - SAVE_EVERY + 1  # never more than it may really be
    with db.session() as s:
        repo.set_last_active(s, "cmp_a", datetime.now(UTC) - timedelta(seconds=10))
    assert ActivityClocks(db).idle_for("cmp_a") < 1  # within the lag: no head start


def test_a_use_another_api_node_stored_counts_here(db: Database) -> None:
    """With several API nodes on one database, a computer used through another node (the time
    it stored on the record) is not idle here, whatever this node's own clock says; the record
    counts from SAVE_EVERY later than it says (never early); what this node stored itself adds
    nothing to its own clock."""
    now = [1000.0]
    here = ActivityClocks(db, clock=lambda: now[0])
    here.touch("cmp_a")
    now[0] += 600
    assert here.idle_for("cmp_a") == 600
    mine = stored(db)
    assert mine is not None
    assert here.idle_by_record("cmp_a", mine) is None  # its own store: its clock decides
    later = mine + timedelta(seconds=1)  # another node stored a later use: not idle here
    got = here.idle_by_record("cmp_a", later)
    assert got is not None and got < 0
    assert here.idle_by_record("cmp_a", None) is None
    fresh = ActivityClocks(db, clock=lambda: now[0])  # a node that never stored it: the record
    got = fresh.idle_by_record("cmp_a", datetime.now(UTC) - timedelta(seconds=100))
    assert got is not None and 100 - SAVE_EVERY - 1 < got <= 100 - SAVE_EVERY + 1
