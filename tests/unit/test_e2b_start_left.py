"""An E2B `Start` whose client leaves before its process is registered (the guest slow to
answer: a wake, a busy host) left a phantom (e2b/processes.py): the registration set the result
of the future the leaving request had cancelled, that raised, and the process stayed in the
table with no task reading it: listed for good, never ended, a `Connect` to it waiting for ever,
and one of its sandbox's `MAX_PER_COMPUTER` slots held. Now it is registered and read all the
same, watched by no one; its end is kept for a `Connect`, and its slot is held until it is
registered, then freed when it ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sanbox.control.guest import Exit, Stdout
from sanbox.e2b import processes
from sanbox.e2b.connect import ConnectError
from sanbox.e2b.processes import ProcessTable
from sanbox.store.models import Org

pytestmark = pytest.mark.unit

CID = "cmp_x"


@dataclass
class FakeProc:
    """A process that prints once and exits when `finish` is set."""

    pid: int = 42
    kept: bool = True
    finish: asyncio.Event = field(default_factory=asyncio.Event)

    async def events(self) -> AsyncIterator[Any]:
        yield Stdout(b"hello\n")
        await self.finish.wait()
        yield Exit(0, None, False)


class Plane:
    @contextlib.asynccontextmanager
    async def kept(self, org: Org, computer_id: str) -> AsyncIterator[Any]:
        raise AssertionError("nothing is attached or forgotten here")
        yield


async def until(what: str, check: Any) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {what}")


def test_a_start_left_before_its_process_is_registered_leaves_no_phantom(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "MAX_PER_COMPUTER", 1)
    proc, answered = FakeProc(), asyncio.Event()

    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[FakeProc]:
        await answered.wait()  # the guest answers late
        yield proc

    async def scenario() -> None:
        table = ProcessTable(Plane(), lambda _cid: "running")  # type: ignore[arg-type]
        org = Org(id="org_x", name="x")
        start = asyncio.ensure_future(
            table.start(CID, org, session(), {"cmd": "sh"}, None, True, False)  # type: ignore[arg-type]
        )
        await until("the start to wait for the guest", lambda: table._starting.count(CID))
        start.cancel()  # its client left
        with pytest.raises(asyncio.CancelledError):
            await start
        with pytest.raises(ConnectError):  # its slot is still held: the process is coming
            table.room(CID)
        answered.set()
        await until("the process to be registered", lambda: table.of(CID))
        (running,) = table.of(CID)
        assert running.listed and running.watchers == set()  # the Start's queue is not there
        assert table._starting.count(CID) == 0
        proc.finish.set()
        await until("the process to end", lambda: running.ended is not None)
        assert not running.listed  # no longer listed; its slot is free
        table.room(CID)
        found = table.find(CID, {"pid": proc.pid}, ended=True)  # a Connect reads its end
        async with found.watch() as queue:
            assert await queue.get() == {"end": {"exited": True, "status": "exit status 0"}}
            assert await queue.get() is None
        table.discard(found)
        assert table.of(CID) == []
        await table.close()

    asyncio.run(scenario())
