"""A Start's deadline that passes while its process is detached (the sandbox paused, the agent
connection gone) kills the process once it is attached again (e2b/processes.py `_overdue`):
nothing is signalled while there is no connection, and the re-attached process gets SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sanbox.control.guest import Exit
from sanbox.e2b.processes import ProcessTable
from sanbox.store.models import Org

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


async def _started(table: ProcessTable, proc: FakeProc, cmd: str) -> tuple[Any, Any]:
    """`cmd` started in the table as `proc`, with a deadline of 0.2 s: its record and queue."""

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
        timeout=0.2,
    )
    return started


def test_a_deadline_passed_while_detached_kills_on_the_next_attach() -> None:
    async def main() -> None:
        first, again = FakeProc(), FakeProc()
        table = ProcessTable(Plane(again), lambda _computer: "held")  # type: ignore[arg-type]
        running, queue = await _started(table, first, "sleep")
        running.watchers.discard(queue)
        first.gone.set()  # the sandbox paused: the process runs on in the guest, detached
        for _ in range(100):
            if running.proc is None:
                break
            await asyncio.sleep(0.01)
        assert running.proc is None
        await asyncio.sleep(0.4)  # past its deadline
        assert running.overdue and first.signals == [] and running.ended is None

        async with running.watch() as watching:
            await table.attach(running)  # resumed: attached again, and killed at once
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
