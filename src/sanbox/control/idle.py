"""The idle watcher: suspends running computers with no exec, file, shell or port activity (and
nothing in progress) for their idle timeout. A suspended computer has no process on the host; the
next command or request wakes it (`guest.running`). A suspension refused for room (its saved
memory would not fit on the data filesystem: 507 `insufficient_storage`) leaves the computer
running; the watcher says so once (a `computer.suspend_refused` event) and tries again only
`REFUSED_AGAIN_AFTER` seconds on, saying nothing more until the computer is used or suspended."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from ..store import repo
from .computers import Computers
from .errors import ControlError, InsufficientStorageError
from .in_flight import InFlight
from .jobs import IDLE
from .states import State

log = logging.getLogger(__name__)

REFUSED_AGAIN_AFTER = 300.0  # seconds before a suspension refused for room is tried again


class IdleWatcher:
    def __init__(self, computers: Computers) -> None:
        self.computers = computers
        self.fleet = computers.fleet
        self.in_flight = InFlight()
        self.refused: dict[str, float] = {}  # computer id -> when its refused suspension may retry

    def due(self) -> list[tuple[str, float]]:
        """Running computers idle past their timeout, with that timeout: by this node's clock
        and by the time its record says it was last used (another API node's use is stored
        there, at most SAVE_EVERY late: counted so, a computer is never suspended early)."""
        with self.fleet.db.session() as s:
            rows = repo.list_computers(s, None, State.RUNNING)
        due = []
        for row in rows:
            if row.idle_timeout <= 0 or self.fleet.idle_for(row.id) < row.idle_timeout:
                continue
            elsewhere = self.fleet.clocks.idle_by_record(row.id, row.last_active_at)
            if elsewhere is not None and elsewhere < row.idle_timeout:  # used through another
                continue  # node meanwhile
            due.append((row.id, float(row.idle_timeout)))
        return due

    async def check(self) -> None:
        """Starts the suspension of each computer due, a task of its own (`in_flight.py`: one
        whose host holds the call holds up no other's)."""
        due, now = self.due(), time.monotonic()
        still = {computer_id for computer_id, _ in due}  # the others were used, or suspended
        self.refused = {k: at for k, at in self.refused.items() if k in still}
        for computer_id, idle in due:
            if self.refused.get(computer_id, now) > now:
                continue  # refused for room lately: looked at again later
            if self.fleet.lock(computer_id).locked():
                continue  # busy now: the next round
            # Not started (its own still runs, or LIMIT do): a later round looks again.
            self.in_flight.start(computer_id, functools.partial(self._suspend, computer_id, idle))

    async def _suspend(self, computer_id: str, idle: float) -> None:
        try:
            await self.computers.suspend(computer_id, idle)
        except InsufficientStorageError as exc:
            self._refused(computer_id, idle, exc)
        except Exception:  # one computer's failure must not stop the watcher
            log.exception("suspending idle computer %s failed", computer_id)

    def _refused(self, computer_id: str, idle: float, exc: InsufficientStorageError) -> None:
        """No room to suspend it: it runs on, said once until it is used or suspended."""
        first = computer_id not in self.refused
        self.refused[computer_id] = time.monotonic() + REFUSED_AGAIN_AFTER
        if not first:
            return
        try:
            self.fleet.record(
                computer_id,
                None,
                "computer.suspend_refused",
                f"idle {idle:.0f}s but not suspended: {exc.message}; tried again every "
                f"{REFUSED_AGAIN_AFTER:.0f}s while it stays idle",
                {"code": exc.code},
            )
        except ControlError:  # deleted meanwhile
            self.refused.pop(computer_id, None)

    async def watch(self, interval: float = 1.0) -> None:
        """Every node stores the use it serves (a shell held open counts all along); the node
        that holds the idle job (control/jobs.py) suspends. The suspensions still running when
        the loop ends (server shutdown) are cancelled and waited for."""
        try:
            while True:
                await asyncio.sleep(interval)
                self.fleet.keep_in_use()
                if await self.fleet.jobs.holds(IDLE):
                    await self.check()
        finally:
            await self.in_flight.close()
