"""Session limits per computer, none unless asked: a `lifetime` (seconds from its creation, then
it is stopped or deleted, `on_lifetime`) and a `max_running` (seconds of running since its last
start or resume, then it is stopped). 0 is none, never a default. Both are absolute times on the
record (`created_at`, `started_at`), so no exec, shell, transfer or connection moves them and a
restarted server keeps them. `DeadlineWatcher` enforces them, like the idle watcher, and says
why in the event and in the computer's `last_error`; it wakes at the next deadline it knows of,
or after its interval for one set meanwhile, and acts through `deadline_acts.py` (under the
computer's operation, the deadline looked at again there). `on_lifetime="pause"` (E2B's
auto-pause) pauses a running computer with its memory instead, or stops it if that pause fails;
`on_lifetime="suspend"` (E2B's auto-pause with auto-resume) suspends it, as the idle watcher does:
its next command or connection wakes it, and a computer resumed or woken after its lifetime ended
gets a fresh one (`fresh_lifetime`: its `wake_lifetime`, E2B's create's timeout, from then).
E2B's pause ends the lifetime (`ended_by_pause`: a paused sandbox has no timeout there): nothing
is due while the computer rests, whatever `on_lifetime` says, and it comes up with a fresh one
(`begin_again`). A pause through /v1 leaves the lifetime as it is: it counts at rest too."""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..store import repo
from ..store.models import ComputerRow
from .errors import InvalidRequestError
from .in_flight import InFlight
from .jobs import DEADLINES
from .states import State

if TYPE_CHECKING:  # the watcher acts through the front door, which imports the verbs
    from .computers import Computers

log = logging.getLogger(__name__)

MAX_LIMIT = 10 * 365 * 86400  # seconds: the longest lifetime or running time one may ask for
ON_LIFETIME = ("stop", "delete", "pause", "suspend")
AFTER_WAKE = 300  # seconds: the least lifetime a computer woken after its lifetime ended gets
_AT_REST = frozenset({State.STOPPED, State.DELETING, State.DELETED, State.CREATING})
_STOPPABLE = frozenset({State.RUNNING, State.PAUSED, State.SUSPENDED})


def check(
    lifetime: int | None,
    on_lifetime: str | None,
    max_running: int | None,
    wake_lifetime: int | None = None,
) -> None:
    limits = (
        ("lifetime", lifetime),
        ("max_running", max_running),
        ("wake_lifetime", wake_lifetime),
    )
    for what, value in limits:
        if value is not None and not 0 <= value <= MAX_LIMIT:
            raise InvalidRequestError(f"{what} is seconds: 0 (none) to {MAX_LIMIT}")
    if on_lifetime is not None and on_lifetime not in ON_LIFETIME:
        raise InvalidRequestError("on_lifetime is `stop`, `delete`, `pause` or `suspend`")


def lifetime_ends(row: ComputerRow) -> datetime | None:
    return row.created_at + timedelta(seconds=row.lifetime) if row.lifetime else None


def lifetime_over(row: ComputerRow, now: datetime) -> bool:
    """Whether the computer's lifetime has ended: its end has passed, or a pause ended it
    (`pause_ended_lifetime`, E2B's pause: in its first second too, though a lifetime is whole
    seconds from creation, one at least, so its end then comes after the pause)."""
    ends = lifetime_ends(row)
    return ends is not None and (ends <= now or bool(row.pause_ended_lifetime))


def ended_by_pause(row: ComputerRow, now: datetime) -> dict[str, Any]:
    """The fields with which a pause (or E2B's pause without memory, a stop) ends the computer's
    lifetime now, marked so: a computer without one is marked alone (it is given none)."""
    if not row.lifetime:
        return {"pause_ended_lifetime": True}
    lifetime = max(1, int((now - row.created_at).total_seconds()))  # whole seconds, 1 at least
    return {"lifetime": lifetime, "pause_ended_lifetime": True}


def begin_again(row: ComputerRow, now: datetime) -> None:
    """A computer coming up (started, resumed, woken; `Fleet.record`): a lifetime over at rest
    that is to be given again (`fresh_lifetime`, as long as its last run had) is, from now, no
    pause ends it any more, and its run (`max_running`) starts now."""
    lifetime = fresh_lifetime(row, now)  # before `started_at` moves: it measures the last run
    if lifetime is not None:
        row.lifetime = lifetime
    row.pause_ended_lifetime = False
    row.started_at = now


def running_ends(row: ComputerRow) -> datetime | None:
    if not row.max_running or row.started_at is None or row.state != State.RUNNING:
        return None
    return row.started_at + timedelta(seconds=row.max_running)


def due(row: ComputerRow, now: datetime) -> tuple[str, str] | None:
    """(`stop` | `delete` | `pause` | `suspend`, why) if a limit of the computer has passed and
    it must act, else None."""
    if row.pause_ended_lifetime and row.state != State.RUNNING:
        return None  # kept as it rests, until it comes up with a fresh lifetime or is deleted
    ends = lifetime_ends(row)
    if ends is not None and ends <= now:
        why = f"its lifetime of {row.lifetime}s ended at {ends:%Y-%m-%d %H:%M:%S} UTC"
        if row.on_lifetime == "delete" and row.state not in (State.DELETING, State.DELETED):
            return "delete", f"deleted: {why}"
        if row.on_lifetime == "pause":
            if row.state == State.RUNNING:
                return "pause", f"paused: {why}"
            return None  # paused (or at rest) already: its memory is kept until resumed
        if row.on_lifetime == "suspend":
            if row.state == State.RUNNING:
                return "suspend", f"suspended: {why}; its next command or connection wakes it"
            return None  # suspended (or at rest) already: woken by its next use
        if row.state in _STOPPABLE:
            return "stop", f"stopped: {why}"
    ends = running_ends(row)
    if ends is not None and ends <= now:
        return "stop", f"stopped: it ran for its max running time of {row.max_running}s"
    return None


def fresh_lifetime(row: ComputerRow, now: datetime) -> int | None:
    """The lifetime (seconds from creation) a computer that suspends at its lifetime's end, or
    whose lifetime a pause ended, gets when it comes up after that end, counted from now,
    `AFTER_WAKE` at least: its `wake_lifetime` (E2B's create's timeout: E2B gives an auto-resumed
    sandbox the timeout it was created with, whatever `set_timeout` or `connect` gave its last
    run), or, without one (made before it was kept, or through /v1), as long again as its last
    run had from its start (or resume) to that end. None: it keeps the one it has."""
    ends = lifetime_ends(row)
    again = row.on_lifetime == "suspend" or row.pause_ended_lifetime
    if not again or ends is None or not lifetime_over(row, now):
        return None
    if row.wake_lifetime:
        period = max(AFTER_WAKE, row.wake_lifetime)
    else:
        ran_from = row.started_at or row.created_at
        period = max(AFTER_WAKE, int((ends - ran_from).total_seconds()))
    return int((now - row.created_at).total_seconds()) + period


def next_wait(rows: list[ComputerRow], now: datetime, interval: float) -> float:
    """Seconds until the first of these computers' deadlines still to come, at most `interval`
    (a limit set or moved meanwhile is found then), at least a little (no busy loop)."""
    ends = [e for row in rows for e in (lifetime_ends(row), running_ends(row)) if e and e > now]
    if not ends:
        return interval
    return max(0.05, min(interval, (min(ends) - now).total_seconds()))


class DeadlineWatcher:
    def __init__(self, computers: Computers) -> None:
        self.computers = computers
        self.fleet = computers.fleet
        self.in_flight = InFlight()

    def due(self, interval: float) -> tuple[list[tuple[ComputerRow, str, str]], float]:
        """The computers whose limits have passed, with what to do and why, and the seconds to
        wait before the next look."""
        now = datetime.now(UTC)
        with self.fleet.db.session() as s:
            rows = repo.computers_with_limits(s)
        acts = [(row, *act) for row in rows if (act := due(row, now)) is not None]
        return acts, next_wait(rows, now, interval)

    async def check(self, interval: float = 1.0) -> float:
        """Starts what is due, each computer's action a task of its own (`in_flight.py`: one
        whose host holds the call holds up no other's); returns the seconds until the next look.
        A computer busy with another operation, or with its own action still running, is
        looked at again next round."""
        acts, wait = self.due(interval)
        for row, action, _why in acts:
            if self.fleet.lock(row.id).locked():
                continue  # busy now: the next round
            # Not started (its own still runs, or LIMIT do): a later round looks again.
            self.in_flight.start(row.id, functools.partial(self._enforce, row.id, action))
        return wait

    async def _enforce(self, computer_id: str, action: str) -> None:
        """`deadline_acts.enforce` through the front door: under the computer's operation, its
        deadline looked at again there."""
        try:
            await self.computers.enforce_deadline(computer_id, action)
        except Exception:  # one computer's failure must not stop the watcher
            log.exception("enforcing the limits of computer %s failed", computer_id)

    async def watch(self, interval: float = 1.0) -> None:
        loop = asyncio.get_running_loop()
        wait = interval
        try:
            while True:
                await asyncio.sleep(wait)
                wait = interval
                if await self.computers.fleet.jobs.holds(DEADLINES):  # one node: control/jobs.py
                    looked = loop.time()
                    wait = await self.check(interval)  # from the look: the look took time too
                    wait = max(0.05, wait - (loop.time() - looked))
        finally:
            await self.in_flight.close()
