"""A watcher's actions in flight: each computer's action a task of its own, one per computer,
a bounded number at once.

The deadline and idle watchers act on every computer that is due. Awaited one after the other,
a computer whose stop or suspension did not answer (its fleet host held the call; a link's call
may take 30 minutes) held up every other computer's behind it, for every org. As tasks, one
slow action holds up no other, and the watcher's next round does not wait for any. A computer
whose action still runs is not acted on again until it ends (no second stop of it meanwhile);
past `LIMIT` actions at once, the rest wait for a later round. `close()`, when the watcher's loop
ends (server shutdown), cancels what still runs and waits for it: none outlives its watcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

# Actions running at once, per watcher: what hanging hosts can hold here is bounded. Past it, the
# rest of a round's due computers are not started: they wait for a later round.
LIMIT = 32


class InFlight:
    def __init__(self, limit: int | None = None) -> None:
        self.limit = LIMIT if limit is None else limit
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def __contains__(self, computer_id: object) -> bool:
        return computer_id in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, computer_id: str, action: Callable[[], Coroutine[Any, Any, Any]]) -> bool:
        """Runs `action()` as a task of its own; False, and nothing run, while the computer's
        last action still runs or `limit` run already: a later round looks again. The action
        logs its own failures (what failed is the watcher's to say); one that escapes is logged
        here, so that no failure goes unseen or stops the watcher."""
        if computer_id in self._tasks or len(self._tasks) >= self.limit:
            return False
        task = asyncio.ensure_future(action())
        self._tasks[computer_id] = task
        task.add_done_callback(lambda done: self._ended(computer_id, done))
        return True

    def _ended(self, computer_id: str, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(computer_id) is task:
            del self._tasks[computer_id]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("the action on computer %s failed", computer_id, exc_info=exc)

    async def close(self) -> None:
        """Cancels the actions still running and waits until each has ended."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
