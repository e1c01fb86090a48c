"""Usage reads run in worker threads, a bounded number at once per org and in all: past either
the next is refused before it starts, and a place comes back when its read has ended in its
thread, not when its caller stopped waiting (a client that went away leaves a read running)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sanbox.control.errors import TooManyRequestsError
from sanbox.control.usage.report_slots import CODE, ReportSlots

pytestmark = pytest.mark.unit


def test_reads_at_once_are_bounded_per_org_and_in_all() -> None:
    async def body() -> None:
        slots = ReportSlots(per_org=1, total=2)
        release = threading.Event()
        loop_thread = threading.get_ident()

        def read() -> int:
            assert threading.get_ident() != loop_thread  # never on the event loop
            release.wait(10)
            return 7

        a = asyncio.ensure_future(slots.run("org_a", read))
        await asyncio.sleep(0)
        with pytest.raises(TooManyRequestsError, match="this org has 1") as by_org:
            await slots.run("org_a", read)
        assert by_org.value.code == CODE and by_org.value.retry_after > 0
        b = asyncio.ensure_future(slots.run("org_b", read))
        await asyncio.sleep(0)
        with pytest.raises(TooManyRequestsError, match="the server has 2"):
            await slots.run("org_c", read)
        release.set()
        assert list(await asyncio.gather(a, b)) == [7, 7]
        assert slots.open() == 0
        assert await slots.run("org_a", lambda: 8) == 8  # the places came back

    asyncio.run(body())


def test_a_caller_that_goes_away_leaves_the_read_its_place() -> None:
    async def body() -> None:
        slots = ReportSlots(per_org=1, total=1)
        started, release = threading.Event(), threading.Event()

        def read() -> None:
            started.set()
            release.wait(10)
            raise RuntimeError("read after its caller left")  # seen by no one: no warning

        waiting = asyncio.ensure_future(slots.run("org_a", read))
        await asyncio.to_thread(started.wait, 10)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert slots.open("org_a") == 1  # the thread still reads
        with pytest.raises(TooManyRequestsError):
            await slots.run("org_a", lambda: None)
        release.set()
        for _ in range(1000):  # the thread's end reaches the loop (10 s at most)
            if not slots.open():
                break
            await asyncio.sleep(0.01)
        assert await slots.run("org_a", lambda: 1) == 1

    asyncio.run(body())
