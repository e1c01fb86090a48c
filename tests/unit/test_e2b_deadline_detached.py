"""A Start's deadline that passes while its process is detached from a running sandbox (the
agent connection gone: a reconnect) kills the process once it is attached again
(e2b/processes.py `_overdue`): nothing is signalled while there is no connection, and the
re-attached process gets SIGKILL.

A pause holds the deadline (e2b/start_deadline.py), as envd's is counted on the guest's clock,
which a pause stops: it counts on from the resume with the time it had left. The server's clock
counted the pause too, so a command paused for longer than its timeout had left was killed the
moment its sandbox was resumed (E2B's runs on for the rest of its timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from sanbox.control.guest import Exit
from sanbox.e2b.envd import Envd
from sanbox.e2b.processes import ProcessTable
from sanbox.store.models import EventRow, Org

pytestmark = pytest.mark.unit


@dataclass
class FakeProc:
    """A kept process's session: its events until `gone` (the connection ends) or a kill."""

    pid: int = 42
    kept: bool = True
    signals: list[int] = field(default_factory=list)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    killed: asyncio.Event = field(default_factory=asyncio.Event)

    async def events(self) -> AsyncIterator[Any]:
        waits = [asyncio.ensure_future(self.gone.wait()), asyncio.ensure_future(self.killed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        if self.killed.is_set():
            yield Exit(137, 9, False)
            return
        raise ConnectionError("the agent connection ended")

    async def signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL:
            self.killed.set()


@dataclass
class Found:
    proc: FakeProc
    lost: dict[int, int]


class Kept:
    supported = True

    def __init__(self, again: FakeProc) -> None:
        self.again = again

    async def attach(self, pid: int, delivered: dict[int, int]) -> Found:
        return Found(self.again, {})

    async def list(self) -> list[Any]:
        return []

    async def forget(self, pid: int) -> None:
        return None


class Plane:
    def __init__(self, again: FakeProc) -> None:
        self.again = again

    @contextlib.asynccontextmanager
    async def kept(self, org: Org, computer_id: str) -> AsyncIterator[Kept]:
        yield Kept(self.again)


async def _started(
    table: ProcessTable, proc: FakeProc, cmd: str, timeout: float = 0.2
) -> tuple[Any, Any]:
    """`cmd` started in the table as `proc`, with a deadline (0.2 s): its record and queue."""

    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[FakeProc]:
        yield proc

    org = Org(id="org_x", name="x")
    started: tuple[Any, Any] = await table.start(
        "cmp_x",
        org,
        session(),  # type: ignore[arg-type]
        {"cmd": cmd},
        None,
        True,
        False,
        timeout=timeout,
    )
    return started


async def _detached(running: Any, proc: FakeProc) -> None:
    """The agent connection ends: the process runs on in the guest, detached."""
    proc.gone.set()
    for _ in range(500):
        if running.proc is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the process never detached")


def test_a_deadline_passed_while_detached_kills_on_the_next_attach() -> None:
    async def main() -> None:
        first, again = FakeProc(), FakeProc()
        table = ProcessTable(Plane(again), lambda _computer: "running")  # type: ignore[arg-type]
        running, queue = await _started(table, first, "sleep")
        running.watchers.discard(queue)
        await _detached(running, first)  # a reconnect: the sandbox runs, its time counts
        await asyncio.sleep(0.4)  # past its deadline
        assert running.overdue and first.signals == [] and running.ended is None

        async with running.watch() as watching:
            await table.attach(running)  # attached again, and killed at once
            event = await asyncio.wait_for(watching.get(), 5)
        assert again.signals == [signal.SIGKILL]
        assert event == {
            "end": {"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}
        }
        await table.close()

    asyncio.run(main())


def test_a_process_that_ends_first_is_never_signalled() -> None:
    async def main() -> None:
        proc = FakeProc()
        table = ProcessTable(Plane(FakeProc()), lambda _computer: "running")  # type: ignore[arg-type]
        running, queue = await _started(table, proc, "true")
        proc.killed.set()  # it ended by itself (its exit said as a kill here, no signal sent)
        await asyncio.wait_for(queue.get(), 5)
        assert running.ended is not None and running.deadline is None
        await asyncio.sleep(0.3)
        assert proc.signals == [] and not running.overdue
        await table.close()

    asyncio.run(main())


@pytest.mark.parametrize("said", [True, False])
def test_a_pause_holds_the_deadline_until_the_resume(said: bool) -> None:
    """`said`: the pause's events reach the table (`held`, `released`); else (another API node
    paused it) the process's detachment from a sandbox at rest holds it, its attach releases it."""

    async def main() -> None:
        first, again = FakeProc(), FakeProc()
        standing = {"cmp_x": "running"}
        table = ProcessTable(Plane(again), standing.__getitem__)  # type: ignore[arg-type]
        running, queue = await _started(table, first, "sleep", timeout=0.3)
        running.watchers.discard(queue)
        standing["cmp_x"] = "held"
        if said:
            table.held("cmp_x")  # computer.pausing
        await _detached(running, first)
        await asyncio.sleep(0.6)  # paused for twice its timeout: none of it counted
        assert not running.overdue and running.ended is None
        assert running.deadline is not None and running.deadline.held
        assert 0.1 < (running.deadline.left() or 0) <= 0.3

        standing["cmp_x"] = "running"
        resumed = time.monotonic()
        if said:
            table.released("cmp_x")  # computer.resumed
        async with running.watch() as watching:
            await table.attach(running)  # not killed at once: it has the rest of its time
            event = await asyncio.wait_for(watching.get(), 5)
        assert time.monotonic() - resumed > 0.1
        assert again.signals == [signal.SIGKILL]
        assert event == {
            "end": {"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}
        }
        await table.close()

    asyncio.run(main())


def test_a_pause_that_failed_counts_the_deadline_on() -> None:
    async def main() -> None:
        proc = FakeProc()
        table = ProcessTable(Plane(FakeProc()), lambda _computer: "running")  # type: ignore[arg-type]
        running, _queue = await _started(table, proc, "sleep", timeout=0.3)
        table.held("cmp_x")  # computer.pausing
        table.released("cmp_x")  # computer.pause_failed: running as it was
        await asyncio.wait_for(proc.killed.wait(), 5)
        assert proc.signals == [signal.SIGKILL] and running.overdue
        await table.close()

    asyncio.run(main())


def test_the_pause_s_events_hold_and_release_the_deadlines() -> None:
    """envd's event tap (`Envd._event`): `computer.pausing` holds, a resume, a wake or a failed
    pause releases."""

    async def main() -> None:
        proc = FakeProc()
        plane = Plane(FakeProc())
        plane.fleet = SimpleNamespace(bus=SimpleNamespace(taps=[]))  # type: ignore[attr-defined]
        envd = Envd(plane, None, False)  # type: ignore[arg-type]
        running, _queue = await _started(envd.processes, proc, "sleep", timeout=30)
        deadline = running.deadline
        assert deadline is not None
        for said, held in [
            ("computer.pausing", True),
            ("computer.resumed", False),
            ("computer.pausing", True),
            ("computer.pause_failed", False),
            ("computer.pausing", True),
            ("computer.woken", False),
        ]:
            envd._event(EventRow(org_id="org_x", computer_id="cmp_x", type=said))
            assert deadline.held is held, said
        await envd.processes.close()

    asyncio.run(main())
