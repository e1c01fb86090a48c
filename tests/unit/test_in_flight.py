"""A watcher's actions in flight: one per computer (no second while the first runs), at most a
bound at once, a failure logged and forgotten (the computer may be acted on again), and all
cancelled and waited for when the watcher ends."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sanbox.control import in_flight
from sanbox.control.in_flight import InFlight

pytestmark = pytest.mark.unit


async def ended(actions: InFlight) -> None:
    async with asyncio.timeout(5):
        while len(actions):
            await asyncio.sleep(0)


def test_one_action_per_computer_while_it_runs() -> None:
    async def scenario() -> list[str]:
        actions, ran, gate = InFlight(), [], asyncio.Event()

        async def act(name: str) -> None:
            ran.append(name)
            await gate.wait()

        assert actions.start("a", lambda: act("a1"))
        assert not actions.start("a", lambda: act("a2"))  # a's first still runs
        assert actions.start("b", lambda: act("b1"))  # another computer is not held up
        await asyncio.sleep(0)
        assert "a" in actions and len(actions) == 2
        gate.set()
        await ended(actions)
        assert actions.start("a", lambda: act("a3"))  # ended: the next round may act again
        await ended(actions)
        return ran

    assert asyncio.run(scenario()) == ["a1", "b1", "a3"]


def test_the_bound_holds_and_the_rest_wait_for_a_later_round() -> None:
    async def scenario() -> tuple[list[bool], int]:
        actions, gate = InFlight(limit=3), asyncio.Event()
        running, peak = [0], [0]

        async def act() -> None:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            try:
                await gate.wait()
            finally:
                running[0] -= 1

        started = [actions.start(f"c{i}", act) for i in range(5)]
        await asyncio.sleep(0)
        gate.set()
        await actions.close()
        return started, peak[0]

    assert asyncio.run(scenario()) == ([True, True, True, False, False], 3)
    assert InFlight().limit == in_flight.LIMIT == 32


def test_a_failure_is_logged_and_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bool:
        actions = InFlight()

        async def fail() -> None:
            raise RuntimeError("the host refused")

        assert actions.start("a", fail)
        await ended(actions)
        again = actions.start("a", fail)  # not held as in flight: tried again next round
        await actions.close()
        return again

    with caplog.at_level(logging.ERROR, logger=in_flight.__name__):
        assert asyncio.run(scenario())
    assert "the action on computer a failed" in caplog.text
    assert "the host refused" in caplog.text


def test_close_cancels_what_runs_and_waits_for_it() -> None:
    async def scenario() -> list[str]:
        actions, seen = InFlight(), []

        async def hang() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0)  # an action's own undo runs before close() returns
                seen.append("cancelled")
                raise

        actions.start("a", hang)
        actions.start("b", hang)
        await asyncio.sleep(0)
        await actions.close()
        assert len(actions) == 0
        return seen

    assert asyncio.run(scenario()) == ["cancelled", "cancelled"]
