"""Rest with memory kept: pause (by the user), suspend (by the idle watcher, at the end of a
lifetime that suspends: `on_lifetime="suspend"`, or by a pause that ends that lifetime: E2B's),
resume and wake. E2B's pause ends the lifetime (`deadlines.ended_by_pause`), and pauses a computer
the idle watcher suspended where it is: its memory is saved already.
Every resume says what it did with memory (`restored`, or `lost` with the reason); a pause that
cannot complete answers `pause_failed`, saying why and what the computer is now (never a success,
never left `pausing`): running as it was, or stopped if its VM is gone, or in error if its host
did not answer."""

from __future__ import annotations

import errno
import logging
import time
from datetime import UTC, datetime
from typing import Any

from ..fleet.errors import BusyError
from ..host.door import Host, HostError, Machine
from ..store.models import ComputerRow, Org
from . import deadlines
from .capacity import Hold
from .errors import (
    ControlError,
    HostUnavailableError,
    InsufficientStorageError,
    failed,
    with_state,
)
from .fleet import VERB_WAIT, Fleet
from .host_errors import from_host
from .states import State, check_action
from .transition import carried_through

log = logging.getLogger(__name__)

WAKE_WAIT = 120.0  # seconds a wake waits for another API node's operation on the computer


async def pause(
    fleet: Fleet, org: Org, ref: str, wake_on_use: bool = False, ends_lifetime: bool = False
) -> ComputerRow:
    """Paused, or with `wake_on_use` suspended (its next command or connection wakes it); with
    `ends_lifetime` (E2B's pause) its lifetime ends at the pause, and no deadline acts on it until
    it comes up again, with a fresh one (`deadlines.py`): `paused` to E2B, kept until connected
    or killed, or, suspended, woken with its create's timeout. A computer the idle watcher
    suspended may then be paused too. Carried through if the caller leaves
    (control/transition.py), as are suspend, resume and wake."""
    paused = _pause(fleet, org, ref, wake_on_use, ends_lifetime)
    return await carried_through(fleet, "pause", paused)


async def _pause(
    fleet: Fleet, org: Org, ref: str, wake_on_use: bool, ends_lifetime: bool
) -> ComputerRow:
    row = fleet.get(org, ref)
    async with fleet.operating(row.id, "pause", row.host_id, wait=VERB_WAIT):
        row = fleet.get(org, row.id)
        resting = row.state == State.SUSPENDED and not row.pause_ended_lifetime
        if ends_lifetime and resting:  # (once: one E2B's pause rested so is refused below)
            return _rest_suspended(fleet, row, wake_on_use)
        check_action("pause", State(row.state), row.name)
        return await pause_locked(fleet, row, wake_on_use, ends_lifetime)


def _rest_suspended(fleet: Fleet, row: ComputerRow, wake_on_use: bool) -> ComputerRow:
    """E2B's pause of a computer the idle watcher suspended: its saved memory is kept as it is,
    its record alone changes: paused (no longer woken by its next use) unless `wake_on_use`, its
    lifetime ended, its rest begun now (E2B's `endAt` of a paused sandbox)."""
    dst = State.SUSPENDED if wake_on_use else State.PAUSED
    now = datetime.now(UTC)
    kind = "suspended still (woken by its next use)" if wake_on_use else "paused where it rested"
    return fleet.record(
        row.id,
        dst,
        f"computer.{dst}",
        f"{kind} by a pause that ends its lifetime: its saved memory is kept",
        rested_at=now,
        **deadlines.ended_by_pause(row, now),
    )


async def pause_locked(
    fleet: Fleet, row: ComputerRow, wake_on_use: bool = False, ends_lifetime: bool = False
) -> ComputerRow:
    """`pause` of a running computer whose operation the caller holds."""
    dst = State.SUSPENDED if wake_on_use else State.PAUSED
    return await _pause_locked(fleet, row, dst, ends_lifetime=ends_lifetime)


async def suspend(fleet: Fleet, computer_id: str, idle: float) -> ComputerRow | None:
    """Pause a computer the idle watcher found idle; None if it changed meanwhile: used here
    since, or through another API node (its record's last use, read again under the
    operation: the watcher's look may be older than that node's store)."""
    return await carried_through(fleet, "suspend", _suspend(fleet, computer_id, idle))


async def _suspend(fleet: Fleet, computer_id: str, idle: float) -> ComputerRow | None:
    try:
        async with fleet.operating(computer_id, "suspend"):
            row = fleet.by_id(computer_id)
            if row is None or row.state != State.RUNNING:
                return None
            elsewhere = fleet.clocks.idle_by_record(row.id, row.last_active_at)
            if fleet.idle_for(row.id) < idle * 0.99 or (elsewhere is not None and elsewhere < idle):
                return None
            return await _pause_locked(fleet, row, State.SUSPENDED, idle)
    except BusyError:  # another API node acts on it: the next round looks again
        return None


async def _pause_locked(
    fleet: Fleet,
    row: ComputerRow,
    dst: State,
    idle: float | None = None,
    ends_lifetime: bool = False,
) -> ComputerRow:
    machine = await fleet.machine_locked(row)
    host = fleet.host_of(row)
    # an interrupted pause that ends the lifetime ends it too (a failed one runs on: cleared)
    ending: dict[str, Any] = {"pause_ended_lifetime": True} if ends_lifetime else {}
    with _admitted(fleet, host, row):
        fleet.record(
            row.id,
            State.PAUSING,
            "computer.pausing",
            "saving memory and devices",
            rest_state=str(dst),  # what a restart ends an interrupted pause as
            **ending,
        )
        try:
            saved = await host.pause(machine, fleet.spec(row), fleet.image_of(row))
        except Exception as exc:  # whatever failed, the record says what the pause left
            raise await _pause_failed(fleet, row, machine, exc) from exc
    fleet.machines.pop(row.id, None)  # egress stays up: the guest's connections outlive a pause
    kind = f"suspended after {idle:.0f}s idle" if idle is not None else str(dst)
    if idle is None and dst == State.SUSPENDED:
        kind = "suspended at its lifetime's end (woken by its next use)"
    ended: dict[str, Any] = {}
    if ends_lifetime:
        ended = deadlines.ended_by_pause(row, datetime.now(UTC))
        woken = " (woken by its next use)" if dst == State.SUSPENDED else ""
        kind = f"{dst} by a pause that ends its lifetime{woken}"
    return fleet.record(
        row.id,
        dst,
        f"computer.{dst}",
        f"{kind}: memory and processes saved ({saved.size / 2**20:.0f} MiB in "
        f"{saved.seconds:.2f}s); no process runs",
        {"state_bytes": saved.size, "seconds": round(saved.seconds, 3)},
        **ended,
    )


def _admitted(fleet: Fleet, host: Host, row: ComputerRow) -> Hold:
    """Room for the pause's saved memory on the data filesystem, held while it is written;
    refused (507 `insufficient_storage`) before anything is, the computer running as it was."""
    try:
        return fleet.capacity.admit_pause(host, row.memory_mib)
    except InsufficientStorageError as exc:
        raise with_state(
            exc,
            "not paused: the computer is still running as it was (stop it instead to keep its "
            "disk without its memory)",
        ) from None


async def _pause_failed(
    fleet: Fleet, row: ComputerRow, machine: Machine, exc: Exception
) -> ControlError:
    """Record what a failed pause left (never `pausing`) and return the error that says so:
    running as it was, if its VM runs; stopped, its disk kept, if its VM is gone; `error` if its
    VM neither runs nor ended, or if its host did not answer (whether it paused is then not
    known until the host answers again: docs/fleet.md, a pause whose answer was lost)."""
    log.warning("pause of %s failed: %s", row.id, exc)
    if isinstance(exc, HostError) and exc.code == HostUnavailableError.code:
        why = f"its host did not answer ({exc})"
        now = "whether its memory was saved is not known: the computer is in error"
        _in_error(fleet, row.id, f"pause failed: {why}; {now}")
        return failed(
            "pause",
            why,
            f"{now}; start it again once its host answers (from its memory if the pause ended, "
            "else afresh)",
        )
    why = pause_failure(exc)
    if machine.vm.alive() and await machine.vm.frozen() is not True:
        fleet.record(
            row.id,
            State.RUNNING,
            "computer.pause_failed",
            f"pause failed: {why}; still running as it was",  # its lifetime runs on (record)
        )
        return failed("pause", why, "the computer is still running as it was")
    if machine.vm.alive():  # its vCPUs stopped, and the host could not end it
        now = "its VM neither runs nor ended: the computer is in error"
        _in_error(fleet, row.id, f"pause failed: {why}; {now}")
        return failed("pause", why, f"{now}; start it again")
    await fleet.vm_exited(row.id, f"its VM died during a pause ({why})", pausing=True)
    return failed("pause", why, "its VM died: the computer is stopped, its disk kept")


def _in_error(fleet: Fleet, computer_id: str, message: str) -> None:
    fleet.machines.pop(computer_id, None)
    fleet.record(computer_id, State.ERROR, "computer.error", message, last_error=message)


def pause_failure(exc: Exception) -> str:
    """Why a pause failed, in words a tenant may read (the host's detail is logged)."""
    if "No space left" in str(exc) or getattr(exc.__cause__, "errno", None) == errno.ENOSPC:
        return "no space left on the data filesystem"
    return "its memory and devices could not be saved"


async def resume(fleet: Fleet, org: Org, ref: str) -> ComputerRow:
    return await carried_through(fleet, "resume", _resume(fleet, org, ref))


async def _resume(fleet: Fleet, org: Org, ref: str) -> ComputerRow:
    async with fleet.acting(org, ref, "resume") as row:
        return await resume_locked(fleet, row)


async def resume_locked(fleet: Fleet, row: ComputerRow, woken: bool = False) -> ComputerRow:
    t0 = time.monotonic()
    host = fleet.host_of(row)
    with fleet.capacity.admit_here(host, row.memory_mib, 0, row.id):
        fleet.record(
            row.id,
            State.RESUMING,
            "computer.resuming",
            "restoring memory and devices",
            rest_state=str(State.SUSPENDED if row.state == State.SUSPENDED else State.PAUSED),
        )
        try:
            machine, outcome = await host.resume(fleet.spec(row), fleet.image_of(row))
        except HostError as exc:
            error = from_host(exc, "resume", row.id)
            fleet.record(
                row.id, State.ERROR, "computer.error", error.message, last_error=error.message
            )
            raise with_state(error, "the computer is in error: start it again") from exc
    await fleet.came_up(row.id, machine)
    took = time.monotonic() - t0
    how = "woken" if woken else "resumed"
    if outcome.restored:
        message = f"{how} in {took:.2f}s; memory: restored"
    else:
        message = f"{how} in {took:.2f}s; memory: {outcome}, booted fresh on its disk"
    return fleet.record(
        row.id,
        State.RUNNING,
        "computer.woken" if woken else "computer.resumed",
        message,
        {
            "memory": "restored" if outcome.restored else "lost",
            "memory_reason": outcome.reason,
            "seconds": round(took, 3),
        },
        memory="restored" if outcome.restored else "lost",
        memory_reason=outcome.reason,
        isolation=machine.isolation,
    )


async def wake(fleet: Fleet, row: ComputerRow) -> None:
    """A command or request reached a suspended computer: resume it first."""
    await carried_through(fleet, "wake", _wake(fleet, row))


async def _wake(fleet: Fleet, row: ComputerRow) -> None:
    async with fleet.operating(row.id, "wake", row.host_id, wait=WAKE_WAIT):
        current = fleet.by_id(row.id)
        if current is not None and current.state == State.SUSPENDED:
            await resume_locked(fleet, current, woken=True)
