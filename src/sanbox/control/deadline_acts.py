"""What a passed deadline does to its computer (`deadlines.py` finds it): stop, delete, pause or
suspend, under the computer's operation across every API node, its record read again there and
its deadline looked at afresh: the watcher's look is older than that operation, and meanwhile
another node may have paused, stopped or deleted the computer, or a `set_timeout` or `connect`
may have moved its lifetime on. A computer another node's operation holds is left to a later
round (busy: never a reason to act otherwise). A lifetime's pause falls back to a stop only when
the pause itself could not be done (`pause_failed`, or no room for its memory: the lifetime is a
limit) and the computer still runs; a computer at rest already has nothing to do, and a paused
one keeps its saved memory."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from ..fleet.errors import BusyError
from ..store.models import ComputerRow
from . import deadlines, lifecycle, pausing
from .errors import InsufficientStorageError, OperationFailedError
from .fleet import Fleet
from .states import State

log = logging.getLogger(__name__)


async def enforce(fleet: Fleet, computer_id: str, kind: str) -> str | None:
    """Do what the computer's passed deadline asks now, if it still asks anything; the action
    done (`stop`, `delete`, `pause`, `suspend`), or None: nothing is due any more, or another
    operation holds the computer (the watcher's next round looks again). `kind` names the
    operation (the action the watcher's look found)."""
    try:
        async with fleet.operating(computer_id, kind):
            row = fleet.by_id(computer_id)
            act = None if row is None else deadlines.due(row, datetime.now(UTC))
            if row is None or act is None:
                return None
            action, why = act
            if action == "delete":
                await lifecycle.delete_locked(fleet, row, why)
            elif action == "stop":
                await lifecycle.stop_locked(fleet, row, why)
            else:
                await _pause_or_stop(fleet, row, why, action == "suspend")
            return action
    except BusyError:
        return None


async def _pause_or_stop(fleet: Fleet, row: ComputerRow, why: str, wake_on_use: bool) -> None:
    try:
        await pausing.pause_locked(fleet, row, wake_on_use)
    except (OperationFailedError, InsufficientStorageError) as exc:
        if isinstance(exc, OperationFailedError) and exc.code != "pause_failed":
            raise
        now = fleet.by_id(row.id)
        if now is None or now.state != State.RUNNING:
            return  # its VM ended, or it is in error: the pause's record says so
        log.warning("the lifetime pause of %s failed (%s): stopping it", row.id, exc)
        await lifecycle.stop_locked(fleet, now, f"{why}; the pause failed, so stopped")
