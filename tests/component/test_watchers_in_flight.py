"""The deadline and idle watchers act on each due computer in a task of its own: a computer whose
stop or suspension hangs (its host holds the call) holds up no other computer's, is not acted on
again while that runs, and the actions at once are bounded; a failure is logged and the computer
tried again; the server's shutdown cancels what still runs. The old watchers awaited each action
in turn: one hanging stop held every other computer's deadline for as long as it hung."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sanbox.control.computers import Computers
from sanbox.control.deadlines import DeadlineWatcher
from sanbox.control.idle import IdleWatcher

from .conftest import Server, serve
from .test_session_limits import create, get, stopped, wait_for

pytestmark = pytest.mark.component


class Stand:
    """A verb of the front door (`Computers.enforce_deadline` or `.suspend`) as the watchers
    call it: each call counted by computer id; for `hanging`, it waits until `release` is set (a
    host that holds the call), then does the real thing; for `failing`, it raises."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, verb: str) -> None:
        self.calls: Counter[str] = Counter()
        self.hanging: str | None = None
        self.failing: str | None = None
        self.happened: list[str] = []  # what ended, in order
        self.release = threading.Event()
        real = getattr(Computers, verb)

        async def stand(computers: Computers, *args: Any) -> Any:
            computer_id = args[0]
            self.calls[computer_id] += 1
            if computer_id == self.failing:
                raise RuntimeError("its host refused")
            if computer_id == self.hanging:
                try:
                    while not self.release.is_set():
                        await asyncio.sleep(0.02)
                except asyncio.CancelledError:
                    self.happened.append(f"{computer_id} cancelled")
                    raise
            elif verb == "suspend":
                return None  # as if it changed meanwhile: due again next round
            return await real(computers, *args)

        monkeypatch.setattr(Computers, verb, stand)


class Rounds:
    """How many times a watcher's `check` has begun."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, watcher: type[Any]) -> None:
        self.count = 0
        real = watcher.check

        async def check(w: Any, *args: Any) -> Any:
            self.count += 1
            return await real(w, *args)

        monkeypatch.setattr(watcher, "check", check)

    def wait(self, n: int) -> None:
        """Returns once `n` more rounds have begun."""
        until = self.count + n
        wait_for(lambda: self.count >= until, f"{n} more rounds")


def due_now(made: dict[str, Any]) -> bool:
    return datetime.now(UTC) >= datetime.fromisoformat(made["lifetime_ends_at"])


def test_a_hanging_stop_holds_up_no_other_deadline(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stop = Stand(monkeypatch, "enforce_deadline")
    rounds = Rounds(monkeypatch, DeadlineWatcher)
    caplog.set_level(logging.ERROR, logger="sanbox.control.deadlines")
    try:
        stuck = create(server, "stuck", lifetime=2)  # made first: first in the watcher's look
        stop.hanging = stuck["id"]
        broken = create(server, "broken", lifetime=2)
        stop.failing = broken["id"]
        create(server, "free", lifetime=2)
        ended = wait_for(lambda: stopped(server, "free"), "free's lifetime to stop it")
        assert "its lifetime of 2s ended" in ended["last_error"]
        wait_for(lambda: stop.calls[broken["id"]] >= 2, "the failed stop to be tried again")
        assert f"enforcing the limits of computer {broken['id']} failed" in caplog.text
        rounds.wait(3)
        assert stop.calls[stuck["id"]] == 1  # in flight all along: never stopped twice
        assert get(server, "stuck")["state"] == "running"
    finally:
        stop.release.set()
    wait_for(lambda: stopped(server, "stuck"), "the held stop to go on once released")
    assert stop.calls[stuck["id"]] == 1


@pytest.fixture
def one_at_a_time(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A server whose watchers run one action at a time."""
    monkeypatch.setattr("sanbox.control.in_flight.LIMIT", 1)
    yield from serve(short_tmp)


def test_past_the_bound_the_rest_wait_for_a_later_round(
    one_at_a_time: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = one_at_a_time
    stop = Stand(monkeypatch, "enforce_deadline")
    rounds = Rounds(monkeypatch, DeadlineWatcher)
    try:
        stuck = create(server, "stuck", lifetime=2)
        stop.hanging = stuck["id"]
        free = create(server, "free", lifetime=2)
        wait_for(lambda: stop.calls[stuck["id"]], "the stuck computer's stop")
        wait_for(lambda: due_now(free), "free's lifetime to end")
        rounds.wait(3)
        assert stop.calls[free["id"]] == 0  # the one place is taken
        assert get(server, "free")["state"] == "running"
    finally:
        stop.release.set()
    wait_for(lambda: stopped(server, "free"), "free's stop once the place is free")
    assert stopped(server, "stuck")
    assert stop.calls == Counter({stuck["id"]: 1, free["id"]: 1})


def test_a_hanging_suspension_holds_up_no_other_and_ends_with_the_server(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suspend = Stand(monkeypatch, "suspend")
    watch = IdleWatcher.watch

    async def watched(watcher: IdleWatcher, *args: Any) -> None:
        try:
            await watch(watcher, *args)
        finally:
            suspend.happened.append("the watcher ended")

    monkeypatch.setattr(IdleWatcher, "watch", watched)
    try:
        with contextlib.contextmanager(serve)(short_tmp) as server:
            stuck = create(server, "stuck", idle_timeout=1)
            suspend.hanging = stuck["id"]
            free = create(server, "free", idle_timeout=1)
            # free is due every round (the stand-in leaves it running): each round acts on it
            wait_for(lambda: suspend.calls[free["id"]] >= 3, "free's suspension, round after round")
            assert suspend.calls[stuck["id"]] == 1  # in flight all along: never twice
    finally:
        suspend.release.set()
    # The shutdown cancelled it, and the watcher waited for it (none left to the loop's end).
    assert suspend.happened == [f"{stuck['id']} cancelled", "the watcher ended"]
