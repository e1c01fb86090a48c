"""Ending a task one started: cancelled, then waited for, without swallowing a cancellation of
the caller itself.

`task.cancel()` then `with suppress(CancelledError): await task` loses the caller's own
cancellation when it lands while the caller waits there (a server's shutdown cancelling a
watcher that was ending a block's helper task): the caller goes on as if never cancelled, and
whoever cancelled it waits forever. `cancel_and_wait` waits with `asyncio.wait`, which hands
the caller's cancellation to nothing else: one that comes while it waits, or was requested
before and not yet delivered, is raised once the task has ended; a caller already cancelled
and running its clean-up (a `finally` ending several tasks) is not stopped at the first."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(
    task: asyncio.Future[Any], ignore: tuple[type[Exception], ...] = ()
) -> None:
    """Cancel `task` and wait until it has ended. Its cancellation, and the errors in `ignore`
    that it ended with, are not raised; another error it ended with is; a cancellation of the
    caller meanwhile is, before either."""
    task.cancel()
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:  # the caller's own: the task's clean-up goes on
            cancelled = exc
    if cancelled is not None:
        raise cancelled  # itself: its message says whose it is (anyio's cancel scopes read it)
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and not isinstance(error, ignore):
        raise error
