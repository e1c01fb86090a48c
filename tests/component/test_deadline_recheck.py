"""The deadline watcher acts under the computer's operation and looks at its deadline again there:
its look is older than that operation. A lifetime pause that meets another API node's pause of
the computer leaves it paused, its saved memory kept (it used to wait for that pause, be refused
"it is paused", and stop the computer, dropping the memory); a lifetime moved on after the look
(a `set_timeout`, a `connect`) leaves it running; a pause that itself fails still stops it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sanbox.control.deadlines import DeadlineWatcher
from sanbox.control.lifecycle import Change
from sanbox.control.states import State
from sanbox.host.errors import HostError
from sanbox.host.runtime import HostRuntime
from sanbox.store.models import ComputerRow, Org

from .conftest import Server, serve

pytestmark = pytest.mark.component


@pytest.fixture
def server(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A server whose own deadline watcher never looks: each test runs the rounds it needs."""

    async def never(_watcher: DeadlineWatcher, *_args: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(DeadlineWatcher, "watch", never)
    yield from serve(short_tmp)


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The computers whose saved memory was dropped."""
    dropped: list[str] = []

    async def drop(_runtime: HostRuntime, computer_id: str) -> None:
        dropped.append(computer_id)

    monkeypatch.setattr(HostRuntime, "drop_saved_memory", drop)
    return dropped


def ended(server: Server, name: str, on_lifetime: str) -> str:
    """A running computer whose lifetime ended a second ago."""
    h = server.headers()
    made = server.client.post("/v1/computers", json={"name": name, "lifetime": 3600}, headers=h)
    assert made.status_code == 201, made.text
    cid: str = made.json()["id"]
    with server.client.app.state.computers.fleet.db.session() as s:  # type: ignore[attr-defined]
        row = s.get(ComputerRow, cid)
        assert row is not None
        row.created_at = datetime.now(UTC) - timedelta(seconds=3601)
        row.on_lifetime = on_lifetime
    return cid


def run(server: Server, scenario: Callable[[], Awaitable[None]]) -> None:
    """`scenario` on the server's loop."""
    assert server.client.portal is not None
    server.client.portal.call(scenario)


async def settled(watcher: DeadlineWatcher) -> None:
    """Returns once the watcher's actions have ended."""
    for _ in range(400):
        if not len(watcher.in_flight):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the watcher's actions never ended")


def test_a_lifetime_pause_that_meets_another_nodes_pause_keeps_its_memory(
    server: Server, dropped: list[str]
) -> None:
    cid = ended(server, "d", "pause")
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    fleet = computers.fleet

    async def scenario() -> None:
        other = fleet.operations.begin(cid, "pause", None, "node-b")  # node B's user pause
        watcher = DeadlineWatcher(computers)
        await watcher.check()  # node A's look: running, its lifetime ended
        for _ in range(10):  # A's action begins meanwhile
            await asyncio.sleep(0)
        fleet.record(cid, State.PAUSING, "computer.pausing", "node B saving")
        fleet.machines.pop(cid, None)
        fleet.record(cid, State.PAUSED, "computer.paused", "node B: paused, memory saved")
        fleet.operations.finish(other.op_id)
        await settled(watcher)
        await watcher.check()  # a later round: paused, so nothing is due
        await settled(watcher)

    run(server, scenario)
    assert fleet.by_id(cid).state == State.PAUSED
    assert dropped == []


@pytest.mark.parametrize("on_lifetime", ["pause", "stop", "delete"])
def test_a_lifetime_moved_on_after_the_watchers_look_leaves_it_running(
    server: Server, dropped: list[str], on_lifetime: str
) -> None:
    cid = ended(server, "d", on_lifetime)
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    fleet = computers.fleet
    with fleet.db.session() as s:
        org = s.get(Org, fleet.by_id(cid).org_id)

    async def scenario() -> None:
        watcher = DeadlineWatcher(computers)
        await watcher.check()  # its look: the lifetime ended; its action not yet begun
        await computers.update(org, cid, Change(lifetime=7200))  # a `set_timeout` meanwhile
        await settled(watcher)

    run(server, scenario)
    row = fleet.by_id(cid)
    assert row is not None and row.state == State.RUNNING
    assert row.last_error is None and dropped == []


def test_a_lifetime_pause_that_fails_stops_it(
    server: Server, dropped: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def pause(_runtime: HostRuntime, *_args: Any) -> Any:
        raise HostError("the monitor refused the migration")

    monkeypatch.setattr(HostRuntime, "pause", pause)
    cid = ended(server, "d", "pause")
    computers = server.client.app.state.computers  # type: ignore[attr-defined]

    async def scenario() -> None:
        watcher = DeadlineWatcher(computers)
        await watcher.check()
        await settled(watcher)

    run(server, scenario)
    row = computers.fleet.by_id(cid)
    assert row is not None and row.state == State.STOPPED
    assert row.last_error is not None and "the pause failed, so stopped" in row.last_error
