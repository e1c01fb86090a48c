"""The registry of API nodes (`fleet/api_nodes.py`): each node's beat counts the nodes that beat
within `LIVE_FOR` on the database's clock and hands the count to its share; a node that leaves or
stops beating is counted out; rows silent for a day go. On SQLite nothing is written and the share
stays the whole bound."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select, update

from sanbox.fleet import clock
from sanbox.fleet.api_nodes import FORGET_AFTER, LIVE_FOR, ApiNodes
from sanbox.fleet.node_share import NodeShare
from sanbox.store import Database
from sanbox.store.fleet_models import ApiNodeRow

pytestmark = pytest.mark.fleet


def _age(db: Database, name: str, seconds: float) -> None:
    """The node's last beat `seconds` ago (time passed without waiting for it)."""
    t = ApiNodeRow.__table__.c
    with db.engine.begin() as conn:
        conn.execute(
            update(ApiNodeRow)
            .where(t.name == name)
            .values(beat_at=clock.at(conn.dialect, -seconds))
        )


def _rows(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ApiNodeRow)).scalar_one())


def test_beats_count_the_live_nodes(pg: Database) -> None:
    a, b = (ApiNodes(pg, name, NodeShare()) for name in ("node-a", "node-b"))
    assert a.beat() == 1
    assert b.beat() == 2 and a.beat() == 2
    assert a.share.of(10) == 5 and b.share.of(10) == 5
    assert a.beat() == 2 and _rows(pg) == 2  # a beat again is the same row
    _age(pg, "node-b", LIVE_FOR + 1)  # b stopped beating (it died): its beat expired
    assert a.beat() == 1 and a.share.of(10) == 10
    assert b.beat() == 2  # it came back
    b.leave()  # a clean stop: counted out at once
    assert a.beat() == 1 and _rows(pg) == 1


def test_a_node_silent_for_a_day_is_forgotten(pg: Database) -> None:
    a, b = (ApiNodes(pg, name, NodeShare()) for name in ("node-a", "node-b"))
    a.beat(), b.beat()
    _age(pg, "node-b", FORGET_AFTER + 1)
    assert a.beat() == 1 and _rows(pg) == 1


def test_serving_beats_then_leaves(pg: Database) -> None:
    other = ApiNodes(pg, "node-b", NodeShare())
    other.beat()
    node = ApiNodes(pg, "node-a", NodeShare(), every=3600)

    async def served() -> None:
        async with node.serving():
            assert node.share.nodes == 2 and _rows(pg) == 2  # counted before the first request
            assert node.task is not None and not node.task.done()

    asyncio.run(served())
    assert _rows(pg) == 1 and other.beat() == 1


def test_one_process_on_sqlite_keeps_the_whole_bound(sqlite_db: Database) -> None:
    node = ApiNodes(sqlite_db, "node-a", NodeShare())

    async def served() -> None:
        async with node.serving():
            assert node.task is None and node.share.of(10) == 10

    asyncio.run(served())
    assert _rows(sqlite_db) == 0
