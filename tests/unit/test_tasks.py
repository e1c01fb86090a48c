"""Ending a task one started (sanbox/tasks.py): its cancellation is not the caller's."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from sanbox.tasks import cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()


def test_the_task_ends_cancelled_and_the_caller_goes_on() -> None:
    async def run() -> bool:
        task = asyncio.ensure_future(_forever())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        return task.cancelled()

    assert asyncio.run(run())


def test_errors_asked_for_are_not_raised_others_are() -> None:
    async def failing() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("its end failed")

    async def run(ignore: tuple[type[Exception], ...]) -> None:
        task = asyncio.ensure_future(failing())
        await asyncio.sleep(0)
        await cancel_and_wait(task, ignore)

    asyncio.run(run((OSError,)))
    with pytest.raises(OSError):
        asyncio.run(run(()))


def _cancels_its_caller_as_it_ends(caller: list[asyncio.Task[None]]) -> asyncio.Task[None]:
    """A task that, cancelled, cancels the one waiting for it as it ends: a shutdown's cancel
    landing while the caller waits for the task it is ending."""

    async def ending() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            caller[0].cancel()
            raise

    return asyncio.ensure_future(ending())


def test_a_cancellation_of_the_caller_while_it_waits_is_raised() -> None:
    went_on: list[bool] = []

    async def caller_body(caller: list[asyncio.Task[None]]) -> None:
        task = _cancels_its_caller_as_it_ends(caller)
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        went_on.append(True)  # as if never cancelled: whoever cancelled it waits forever

    async def run() -> bool:
        caller: list[asyncio.Task[None]] = []
        caller.append(asyncio.ensure_future(caller_body(caller)))
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller[0], 5)
        return caller[0].cancelled()

    assert asyncio.run(run())
    assert went_on == []


def test_a_caller_already_cancelled_ends_every_task_of_its_clean_up() -> None:
    # a relay whose key lapsed: its work task is cancelled, and its `finally` ends both of its
    # halves; the second went on, orphaned, when the first end raised the caller's cancel again
    ended: list[str] = []

    async def half(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    async def work() -> None:
        up, down = asyncio.ensure_future(half("up")), asyncio.ensure_future(half("down"))
        try:
            await asyncio.Event().wait()
        finally:
            for task in (up, down):
                await cancel_and_wait(task)

    async def run() -> list[str]:
        task = asyncio.ensure_future(work())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        return list(ended)  # before asyncio.run ends what is left

    assert asyncio.run(run()) == ["up", "down"]


def test_a_cancellation_asked_before_it_waits_is_raised_once_the_task_ended() -> None:
    ended: list[bool] = []

    async def slow_to_end() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)
            ended.append(True)

    async def caller(me: list[asyncio.Task[None]]) -> None:
        task = asyncio.ensure_future(slow_to_end())
        await asyncio.sleep(0)
        me[0].cancel()  # asked while it runs: delivered at its next wait
        await cancel_and_wait(task)

    async def run() -> bool:
        me: list[asyncio.Task[None]] = []
        me.append(asyncio.ensure_future(caller(me)))
        with pytest.raises(asyncio.CancelledError):
            await me[0]
        return me[0].cancelled()

    assert asyncio.run(run())
    assert ended == [True]


def test_a_cancel_scope_of_anyio_knows_its_cancellation_raised_through_it() -> None:
    # anyio (Starlette's TestClient, uvicorn's lifespan) tells its scope's cancellation by its
    # message: a new CancelledError raised in its place escaped the scope
    async def run() -> str:
        task = asyncio.ensure_future(_forever())
        await asyncio.sleep(0)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await cancel_and_wait(task)  # the scope's cancel arrives while it waits
            return "went on"
        return "ended by its scope"

    assert asyncio.run(run()) == "ended by its scope"
