"""A Start's deadline (`Connect-Timeout-Ms`, the SDK's command `timeout`), counted while its
sandbox runs.

envd counts it in the guest (a Go context's timer, on the guest's monotonic clock), and a pause
stops the guest's clocks: E2B's resume steps only the wall clock, so a command paused with 30 s
of its timeout left still has 30 s once the sandbox runs again, however long the pause was. The
server's clock does not stop, so the deadline is held while its sandbox is at rest (`hold`, from
the pause's start) and counts on from its resume (`release`). Sans-IO but for the loop's timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StartDeadline:
    """Calls `due` once `seconds` of its sandbox's running time have passed."""

    def __init__(self, seconds: float, due: Callable[[], None]) -> None:
        self._due = due
        self._held: float | None = None  # seconds left while held
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            seconds, self._fire
        )

    def _fire(self) -> None:
        self._timer = None
        self._due()

    @property
    def held(self) -> bool:
        return self._held is not None

    def left(self) -> float | None:
        """Seconds of running time left; None once it passed or was cancelled."""
        if self._held is not None:
            return self._held
        if self._timer is None:
            return None
        return max(0.0, self._timer.when() - asyncio.get_running_loop().time())

    def hold(self) -> None:
        """Its sandbox stopped running (a pause): the time left is kept, not counted."""
        if self._timer is not None:
            self._held = self.left()
            self._timer.cancel()
            self._timer = None

    def release(self) -> None:
        """Its sandbox runs again: the time left counts on from now."""
        if self._held is not None:
            left, self._held = self._held, None
            self._timer = asyncio.get_running_loop().call_later(left, self._fire)

    def cancel(self) -> None:
        self._held = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
