"""A transition carried through to its end, whatever becomes of the caller who asked for it.

A start, stop, restart, pause, suspend, resume, wake or delete writes a state on the way
(`starting`, `stopping`, `pausing`, `resuming`, `deleting`) and then its outcome. Its callers are
cancelled for real: Starlette cancels a streaming response whose client went (E2B's process
`Connect` wakes a suspended sandbox inside one), an MCP client cancels a tool call, a WebSocket's
key lapses. Cancelled between the two writes, the computer would keep the state on the way with
nothing to end it. So the verb runs as a task of the fleet (as a create's provision does): the
caller waits for it shielded, and one that leaves leaves it running, under the computer's lock and
its operation to the end, its outcome recorded and any error logged. The VM watcher's sweep
(`control/interrupted.py settle_left`) settles what another path may still leave."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from .fleet import Fleet

log = logging.getLogger(__name__)

T = TypeVar("T")


async def carried_through(fleet: Fleet, verb: str, step: Coroutine[Any, Any, T]) -> T:
    """`step`'s result; the caller's cancellation leaves it running to its end (the server's
    own end cancels it: the reconciler finishes it at the next start)."""
    task = fleet.spawn(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(lambda done: _told(verb, done))
        raise


def _told(verb: str, task: asyncio.Task[Any]) -> None:
    """A transition whose caller left has ended: its error, which no one awaits, logged."""
    if task.cancelled():
        return
    if (exc := task.exception()) is not None:
        log.warning("%s whose caller went ended in error: %s", verb, exc)
