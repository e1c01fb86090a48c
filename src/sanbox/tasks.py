"""Ending a task one started: cancelled, then waited for, without swallowing a cancellation of
the caller itself.

`task.cancel()` then `with suppress(CancelledError): await task` loses the caller's own
cancellation when it lands while the caller waits there (a server's shutdown cancelling a
watcher that was ending a block's helper task): the caller goes on as if never cancelled, and
whoever cancelled it waits forever. `cancel_and_wait` tells the two apart by the caller's
pending cancellations (`Task.cancelling`)."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(
    task: asyncio.Future[Any], ignore: tuple[type[Exception], ...] = ()
) -> None:
    """Cancel `task` and wait until it has ended. Its cancellation, and the errors in `ignore`
    that it ended with, are not raised; a cancellation of the caller is, even one that `task`
    took in its place (asyncio hands a waiting caller's cancellation to what it waits for) and
    then swallowed."""
    me = asyncio.current_task()
    before = me.cancelling() if me is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if me is not None and me.cancelling():
            raise
        return
    except ignore:
        pass
    if me is not None and me.cancelling() > before:
        raise asyncio.CancelledError
