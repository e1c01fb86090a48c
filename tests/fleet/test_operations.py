"""One incomplete operation per computer across connections (the partial unique index is the
guard), and the sweep of stale operations that skips rows another sweeper holds."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from sanbox.fleet.errors import BusyError
from sanbox.fleet.operations import Operation, Operations
from sanbox.store import Database
from sanbox.store.fleet_models import OperationRow

from .conftest import wait_for

pytestmark = pytest.mark.fleet


def test_a_second_operation_waits_for_the_first_to_finish(any_db: Database) -> None:
    ops = Operations(any_db)
    first = ops.begin("cmp_a", "start", host_id="hst_1")
    with pytest.raises(BusyError) as busy:
        ops.begin("cmp_a", "stop")
    assert (busy.value.code, busy.value.op_id) == ("busy", first.op_id)
    assert "start" in busy.value.message
    other = ops.begin("cmp_b", "stop")  # another computer is not held up
    assert ops.finish(first.op_id)
    assert not ops.finish(first.op_id)  # once
    second = ops.begin("cmp_a", "stop")
    assert ops.finish(second.op_id, error="the host refused") and ops.finish(other.op_id)
    with any_db.session() as s:
        states = s.scalars(select(OperationRow.state).order_by(OperationRow.id)).all()
    assert states == ["done", "done", "failed"]


def test_concurrent_begins_on_one_computer_exactly_one_wins(pg: Database) -> None:
    ops, threads = Operations(pg), 6
    barrier = threading.Barrier(threads)

    def attempt(computer_id: str) -> Operation | None:
        barrier.wait()
        try:
            return ops.begin(computer_id, "start")
        except BusyError:
            return None

    with ThreadPoolExecutor(threads) as pool:
        for round_ in range(10):
            results = list(pool.map(attempt, [f"cmp_{round_}"] * threads))
            winners = [r for r in results if r is not None]
            assert len(winners) == 1, results


def test_stale_operations_are_swept_skipping_locked_rows(pg: Database) -> None:
    ops = Operations(pg)
    held, free = ops.begin("cmp_held", "snapshot"), ops.begin("cmp_free", "start")
    assert ops.sweep_stale(older_than=3600) == []
    with pg.engine.connect() as other, other.begin():  # another sweeper is on this row
        other.execute(
            select(OperationRow.id).where(OperationRow.op_id == held.op_id).with_for_update()
        )
        swept = wait_for(lambda: ops.sweep_stale(older_than=0.2))  # does not wait for it
        assert [o.op_id for o in swept] == [free.op_id]
    assert [o.op_id for o in ops.sweep_stale(older_than=0.2)] == [held.op_id]
    assert not ops.finish(free.op_id)  # it was closed as abandoned
    with pg.session() as s:
        row = s.scalars(select(OperationRow).where(OperationRow.op_id == free.op_id)).one()
    assert row.state == "abandoned" and row.error == "its node gave no sign of life in 0.2 s"
    ops.finish(ops.begin("cmp_free", "start").op_id)  # the computer takes work again


def test_a_node_that_starts_again_abandons_what_it_left(any_db: Database) -> None:
    ops = Operations(any_db)
    mine = ops.begin("cmp_a", "stop", node="api-1:aaaa")
    theirs = ops.begin("cmp_b", "pause", node="api-2:bbbb")
    assert ops.abandon_node("api-1:aaaa") == 1
    assert ops.incomplete("cmp_a") is None  # free again at once
    assert ops.incomplete("cmp_b") == theirs  # another node's: untouched
    assert not ops.finish(mine.op_id)  # closed already: its late finish changes nothing
    with any_db.session() as s:
        row = s.scalars(select(OperationRow).where(OperationRow.op_id == mine.op_id)).one()
    assert (row.state, row.error) == ("abandoned", "its API node restarted")
    assert ops.finish(theirs.op_id)


def _aged(db: Database, op: Operation, started: float, beat: float | None) -> None:
    """Its start and its last beat (None: none, as a node from before beats) so many seconds
    ago."""
    now = datetime.now(UTC)
    with db.engine.begin() as conn:
        conn.execute(
            update(OperationRow)
            .where(OperationRow.op_id == op.op_id)
            .values(
                started_at=now - timedelta(seconds=started),
                beat_at=None if beat is None else now - timedelta(seconds=beat),
            )
        )


def test_a_long_operation_whose_node_beats_is_not_swept(any_db: Database) -> None:
    """The sweep measures a node's last sign of life, not how long its operation has run: a
    snapshot's move of a large disk ran past the sweep's limit, was abandoned, and another node
    could act on what it was moving. One whose node stopped beating is swept as before."""
    ops = Operations(any_db)
    beaten, silent = ops.begin("cmp_long", "move"), ops.begin("cmp_dead", "move")
    _aged(any_db, beaten, started=7200, beat=7000)
    _aged(any_db, silent, started=7200, beat=700)  # its node beat, then died
    assert ops.beat(beaten.op_id)
    # begun by a node from before beats (an upgrade under way): given the time it had then
    old_young, old_old = ops.begin("cmp_old1", "stop"), ops.begin("cmp_old2", "stop")
    _aged(any_db, old_young, started=600, beat=None)
    _aged(any_db, old_old, started=1000, beat=None)
    swept = {o.op_id for o in ops.sweep_stale(older_than=300)}
    assert swept == {silent.op_id, old_old.op_id}
    assert ops.incomplete("cmp_long") is not None
    assert not ops.beat(silent.op_id)  # closed: its node is told so at its next beat
    assert ops.finish(beaten.op_id)


def test_a_running_operation_is_beaten_until_it_ends(any_db: Database) -> None:
    ops = Operations(any_db)
    op = ops.begin("cmp_beats", "snapshot")

    def beat_at() -> datetime | None:
        with any_db.session() as s:
            row = s.scalars(select(OperationRow).where(OperationRow.op_id == op.op_id)).one()
        return row.beat_at

    async def run() -> None:
        beating = asyncio.ensure_future(ops.keep_beating(op.op_id, every=0.05))
        seen: set[datetime] = set()
        for _ in range(200):
            if (at := beat_at()) is not None:
                seen.add(at)
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.02)
        assert len(seen) >= 2, "no beats written"
        assert ops.finish(op.op_id)
        await asyncio.wait_for(beating, 5)  # closed: it stops on its own

    asyncio.run(run())


def _state(db: Database, op_id: str) -> str:
    with db.session() as s:
        return s.scalars(select(OperationRow.state).where(OperationRow.op_id == op_id)).one()


def test_a_block_whose_operation_was_swept_holds_the_computer_again(any_db: Database) -> None:
    # A node that gave no sign of life in time (a database out of its reach) has its operation
    # closed by another node's sweep; once it beats again and finds it closed, it begins the
    # computer's operation again (nobody else took it), so the block never runs unheld.
    ops = Operations(any_db)
    first = ops.begin("cmp_swept", "snapshot", node="n1")

    async def run() -> str:
        async with ops.carried(first, "n1", every=0.05) as held:
            assert [o.op_id for o in ops.sweep_stale(older_than=0)] == [first.op_id]
            for _ in range(200):
                if held.op.op_id != first.op_id:
                    break
                await asyncio.sleep(0.02)
            again = ops.incomplete("cmp_swept")
            assert again is not None and again.op_id == held.op.op_id != first.op_id
            assert (again.kind, held.lost) == ("snapshot", None)
            ops.finish(held.op.op_id)
            return held.op.op_id

    second = asyncio.run(run())
    assert (_state(any_db, first.op_id), _state(any_db, second)) == ("abandoned", "done")


def test_a_block_whose_computer_another_node_took_meanwhile_is_stopped(any_db: Database) -> None:
    # Its operation swept, another node began one on the computer before this node beat again:
    # the block is cancelled and says `busy` (two operations at once is what the hold exists to
    # prevent), and the other node's operation is left as it is.
    ops = Operations(any_db)
    first = ops.begin("cmp_taken", "stop", node="n1")
    other: list[Operation] = []
    reached = False

    async def run() -> None:
        nonlocal reached
        async with ops.carried(first, "n1", every=0.05):
            assert ops.sweep_stale(older_than=0)
            other.append(ops.begin("cmp_taken", "start", node="n2"))
            await asyncio.Event().wait()  # a long step: only the lost hold ends it
            reached = True

    with pytest.raises(BusyError) as busy:
        asyncio.run(asyncio.wait_for(run(), 30))
    assert not reached
    assert busy.value.code == "busy" and "another has begun since" in busy.value.message
    assert other[0].op_id in busy.value.message
    assert ops.incomplete("cmp_taken") == other[0]
    assert _state(any_db, first.op_id) == "abandoned"


def test_a_block_that_ends_while_its_operation_is_begun_again_leaves_none_open(
    any_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The block ends while its hold is being begun again in a thread (a slow database): the
    # thread still inserts the new operation, which is finished, not left to hold the computer
    # (every verb on it busy) until a sweep.
    ops = Operations(any_db)
    first = ops.begin("cmp_slow", "resume", node="n1")
    real, beginning, release = ops.begin, threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Operation:
        beginning.set()
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "begin", slow)

    async def run() -> None:
        async with ops.carried(first, "n1", every=0.05):
            assert ops.sweep_stale(older_than=0)
            while not beginning.is_set():
                await asyncio.sleep(0.02)
            threading.Timer(0.2, release.set).start()  # the thread begins once the block ended

    asyncio.run(run())
    assert ops.incomplete("cmp_slow") is None


def test_a_cancellation_as_the_block_ends_is_not_lost(
    any_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server's shutdown cancelled its VM watcher just as the watcher's settle block ended,
    # while the block's hold was being ended: the cancellation was swallowed with the hold's,
    # the watcher went on as if never cancelled, and the shutdown waited for it forever.
    ops = Operations(any_db)
    op = ops.begin("cmp_shut", "settle", node="n1")
    owner: list[asyncio.Task[None]] = []
    went_on: list[bool] = []

    async def beating(self: Operations, op_id: str, every: float | None = None) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # the hold ended as the block ends: the shutdown now
            owner[0].cancel()
            raise

    monkeypatch.setattr(Operations, "keep_beating", beating)

    async def watcher() -> None:
        async with ops.carried(op, "n1"):
            await asyncio.sleep(0)  # its hold begins beating
        went_on.append(True)
        await asyncio.Event().wait()  # the watcher's next round, which nothing ends

    async def run() -> bool:
        owner.append(asyncio.ensure_future(watcher()))
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(owner[0], 10)
        return owner[0].cancelled()

    assert asyncio.run(run())
    assert went_on == []
