"""Builds take turns by org: with one slot, an org with builds queued first waits behind every
other org's next build (a FIFO queue let one org's builds hold every other org's for as long as
they ran); a build cancelled while it waits gives up its turn and no slot is lost."""

from __future__ import annotations

import asyncio

import pytest

from sanbox.control.build_slots import FairSlots

pytestmark = pytest.mark.unit


def test_orgs_take_turns() -> None:
    async def scenario() -> list[str]:
        slots, ran = FairSlots(1), []
        gate = asyncio.Event()

        async def build(org: str, name: str) -> None:
            async with slots.held(org):
                ran.append(name)
                await gate.wait()

        first = asyncio.ensure_future(build("a", "a1"))
        await asyncio.sleep(0)
        queued = [("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("b", "b2")]
        tasks = [asyncio.ensure_future(build(org, name)) for org, name in queued]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *tasks)
        return ran

    assert asyncio.run(scenario()) == ["a1", "a2", "b1", "c1", "a3", "b2"]


def test_a_cancelled_wait_loses_no_slot() -> None:
    async def scenario() -> bool:
        slots = FairSlots(1)
        held = asyncio.Event()
        release = asyncio.Event()

        async def holder() -> None:
            async with slots.held("a"):
                held.set()
                await release.wait()

        task = asyncio.ensure_future(holder())
        await held.wait()
        waiter = asyncio.ensure_future(slots.held("b").__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        release.set()
        await task
        async with asyncio.timeout(1), slots.held("c"):  # the one slot is free again
            assert slots.locked()
        return not slots.locked()

    assert asyncio.run(scenario())
