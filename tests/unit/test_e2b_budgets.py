"""What one sandbox may hold of the server's memory: a process's watching stream queues a bounded
number of bytes (not only of events), so does a watcher the SDK polls; and two creates at once
at the limit (processes, watchers) cannot both pass the count checked before the guest is asked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sanbox.control.computers import Computers
from sanbox.control.guest import FileInfo, FsEvent
from sanbox.e2b import envd_watch, processes
from sanbox.e2b.budgets import QUEUE_BYTES, EventQueue
from sanbox.e2b.connect import ConnectError
from sanbox.e2b.envd import Sandbox
from sanbox.e2b.envd_watch import MAX_QUEUED_BYTES, Queued, Watchers
from sanbox.e2b.processes import ProcessTable
from sanbox.e2b.running import Running
from sanbox.store.models import Org

pytestmark = pytest.mark.unit

ORG = cast(Org, SimpleNamespace(id="org_x"))
CHUNK = "x" * (87 * 1024)  # 64 KiB of output, in base64


def test_a_watching_stream_queues_a_bounded_number_of_bytes() -> None:
    async def body() -> int:
        running = Running("cmp_x", ORG, {}, None, 1, False, None)
        async with running.watch() as queue:
            held = 0
            with contextlib.suppress(asyncio.QueueFull):
                while True:
                    queue.put_nowait({"data": {"stdout": CHUNK}})
                    held += len(CHUNK)
            return held

    assert asyncio.run(body()) <= QUEUE_BYTES + len(CHUNK)


def test_the_streams_watching_one_process_are_bounded() -> None:
    async def body() -> None:
        running = Running("cmp_x", ORG, {}, None, 7, False, None)
        async with contextlib.AsyncExitStack() as watching:
            for _ in range(processes.MAX_WATCHERS):
                await watching.enter_async_context(running.watch())
            with pytest.raises(ConnectError, match="close one") as refused:
                await watching.enter_async_context(running.watch())
            assert refused.value.code == "resource_exhausted"
        assert not running.watchers  # each gave its place back
        async with running.watch():
            pass

    asyncio.run(body())


def test_one_event_fits_an_empty_queue_and_a_put_waits_for_room() -> None:
    async def body() -> None:
        queue = EventQueue(most_bytes=1000)
        queue.put_nowait({"data": {"stdout": "y" * 5000}})  # bigger than the budget: alone
        putting = asyncio.ensure_future(queue.put({"data": {"stdout": "z"}}))
        await asyncio.sleep(0)
        assert not putting.done()  # waits for room, holds nothing more
        assert (await queue.get())["data"]["stdout"] == "y" * 5000  # type: ignore[index]
        await putting
        assert queue.bytes < 1000

    asyncio.run(body())


def test_a_polled_watcher_queues_a_bounded_number_of_bytes() -> None:
    class Batch:
        def __init__(self) -> None:
            self.sent = False

        async def next(self) -> list[FsEvent] | None:
            if self.sent:
                return None
            self.sent = True
            return [FsEvent(f"{i:04}" + "n" * 4092, "create") for i in range(2000)]

    queued = Queued()
    asyncio.run(queued.read(Batch()))  # type: ignore[arg-type]
    taken = queued.take()
    assert sum(len(e["name"]) for e in taken) <= MAX_QUEUED_BYTES
    with pytest.raises(ConnectError) as lost:
        queued.take()
    assert lost.value.code == "data_loss"


class Guest:
    """A plane whose guest answers after a round trip (each await lets the other create run)."""

    def __init__(self) -> None:
        self.forever = asyncio.Event()

    async def stat_file(self, _org: Org, _computer: str, path: str) -> FileInfo:
        await asyncio.sleep(0)
        return FileInfo("w", path, "dir", 0, 0o40755, 0.0, 0, 0)

    @contextlib.asynccontextmanager
    async def watch_dir(self, *_args: Any) -> AsyncIterator[Any]:
        await asyncio.sleep(0)
        yield self

    async def next(self) -> list[FsEvent] | None:
        await self.forever.wait()
        return None


def test_two_watchers_created_at_once_at_the_limit_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(envd_watch, "MAX_WATCHERS", 1)

    async def body() -> list[Any]:
        sb = Sandbox(cast(Computers, Guest()), ORG, "cmp_x", "root", "/root", {})
        watchers = Watchers()
        made = await asyncio.gather(
            watchers.create(sb, {"path": "/w"}),
            watchers.create(sb, {"path": "/w"}),
            return_exceptions=True,
        )
        for answer in made:
            if isinstance(answer, dict):
                await watchers.remove(sb, answer)
        return list(made)

    made = asyncio.run(body())
    assert sum(isinstance(m, dict) for m in made) == 1, made
    refused = [m for m in made if isinstance(m, ConnectError)]
    assert [e.code for e in refused] == ["resource_exhausted"]


class Proc:
    """A started process that runs until cancelled."""

    kept = True

    def __init__(self, pid: int) -> None:
        self.pid = pid

    async def events(self) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield None


def test_two_processes_started_at_once_at_the_limit_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "MAX_PER_COMPUTER", 1)

    @contextlib.asynccontextmanager
    async def session(pid: int) -> AsyncIterator[Any]:
        await asyncio.sleep(0)  # the guest starts it
        yield Proc(pid)

    async def body() -> list[Any]:
        table = ProcessTable(cast(Computers, None), lambda _c: "running")
        started = await asyncio.gather(
            *(table.start("cmp_x", ORG, session(pid), {}, None, True, False) for pid in (1, 2)),
            return_exceptions=True,
        )
        await table.close()
        return list(started)

    started = asyncio.run(body())
    assert sum(isinstance(s, tuple) for s in started) == 1, started
    assert [s.code for s in started if isinstance(s, ConnectError)] == ["resource_exhausted"]
