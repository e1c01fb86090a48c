"""Start, stop, restart, update and delete: a computer's compute coming and going on its disk.

A start boots fresh on the disk (a paused or suspended computer is resumed instead: its memory is
kept); a stop ends the VM and keeps the disk, dropping any saved memory on purpose; a delete
removes the VM, the disk and the record. Each runs under the computer's lock and writes its
events."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..host.door import HostError
from ..store.models import ComputerRow, Org
from . import deadlines
from .errors import InvalidRequestError, failed, with_state
from .fleet import VERB_WAIT, Fleet
from .host_errors import from_host
from .pausing import resume_locked
from .states import State, check_action
from .transition import carried_through

log = logging.getLogger(__name__)


# on their way to another state, under their lock; and at rest
_UNDER_WAY = frozenset(
    {State.CREATING, State.STARTING, State.STOPPING, State.PAUSING, State.RESUMING}
)
_AT_REST = frozenset({State.PAUSED, State.SUSPENDED, State.STOPPED, State.ERROR})


async def start(fleet: Fleet, org: Org, ref: str) -> ComputerRow:
    """Running; carried through if the caller leaves (control/transition.py), as are every
    verb here that moves a computer through a state on the way."""
    return await carried_through(fleet, "start", _start(fleet, org, ref))


async def _start(fleet: Fleet, org: Org, ref: str) -> ComputerRow:
    async with fleet.acting(org, ref, "start") as row:
        return await _start_locked(fleet, row)


async def _start_locked(fleet: Fleet, row: ComputerRow) -> ComputerRow:
    if row.state in (State.PAUSED, State.SUSPENDED):
        return await resume_locked(fleet, row)
    if row.state == State.ERROR and fleet.host_of(row).has_saved_memory(row.id):
        # a pause whose answer was lost may have ended: its memory is taken if it is whole
        # (checked as any resume's), else the computer boots afresh, saying why
        return await resume_locked(fleet, row)
    why = "it was stopped: stop drops memory on purpose"
    if row.state == State.ERROR:
        why = "it was in error, with no saved memory"
    return await boot(fleet, row, why)


async def come_up(fleet: Fleet, org: Org, ref: str) -> tuple[ComputerRow, bool]:
    """The computer running, for a caller about to use it (E2B's `connect`), and whether it was
    at rest: one on its way somewhere (an auto-pause, a stop) is waited for under its lock, as
    any verb waits, then resumed or started if that left it at rest. Answering at once would
    leave it at rest, and the caller's next command refused."""
    return await carried_through(fleet, "start", _come_up(fleet, org, ref))


async def _come_up(fleet: Fleet, org: Org, ref: str) -> tuple[ComputerRow, bool]:
    row = fleet.get(org, ref)
    if row.state not in _UNDER_WAY | _AT_REST:
        return row, False
    async with fleet.operating(row.id, "start", row.host_id, wait=VERB_WAIT):
        row = fleet.get(org, row.id)
        if row.state in _AT_REST:
            return await _start_locked(fleet, row), True
        check_action("use", State(row.state), row.name)  # an operation that did not end
        return row, False


async def boot(fleet: Fleet, row: ComputerRow, why_fresh: str) -> ComputerRow:
    host, image = fleet.host_of(row), fleet.image_of(row)
    with fleet.capacity.admit_here(host, row.memory_mib, 0, row.id):
        fleet.record(row.id, State.STARTING, "computer.starting", "booting on its disk")
        try:
            machine = await host.start(fleet.spec(row), image)
        except HostError as exc:
            error = from_host(exc, "start", row.id)
            fleet.record(
                row.id, State.ERROR, "computer.error", error.message, last_error=error.message
            )
            raise with_state(error, "the computer is in error: start it again") from exc
    await fleet.came_up(row.id, machine)
    return fleet.record(
        row.id,
        State.RUNNING,
        "computer.running",
        f"running ({machine.isolation}); memory: lost ({why_fresh}), booted fresh on its disk",
        {"isolation": machine.isolation, "memory": "lost", "memory_reason": why_fresh},
        isolation=machine.isolation,
        last_error=None,
        memory="lost",
        memory_reason=why_fresh,
    )


async def stop(
    fleet: Fleet, org: Org, ref: str, why: str | None = None, ends_lifetime: bool = False
) -> ComputerRow:
    """Stop; `why` (an automatic stop's reason) goes in its event and its `last_error`; with
    `ends_lifetime` (E2B's pause without memory) its lifetime ends there, as a pause's does
    (`deadlines.ended_by_pause`)."""
    return await carried_through(fleet, "stop", _stop(fleet, org, ref, why, ends_lifetime))


async def _stop(
    fleet: Fleet, org: Org, ref: str, why: str | None, ends_lifetime: bool
) -> ComputerRow:
    async with fleet.acting(org, ref, "stop") as row:
        return await stop_locked(fleet, row, why, ends_lifetime)


async def stop_locked(
    fleet: Fleet, row: ComputerRow, why: str | None = None, ends_lifetime: bool = False
) -> ComputerRow:
    """Stop a computer that may stop (running, paused or suspended), under its operation."""
    if row.state in (State.PAUSED, State.SUSPENDED):
        await fleet.host_of(row).drop_saved_memory(row.id)
        await fleet.network_down(row.id)
        said = "stopped: its saved memory was dropped on purpose; disk kept"
        if why is not None:
            said = f"{why}; its saved memory was dropped; disk kept"
        data = {"why": why} if why else None
        ended = deadlines.ended_by_pause(row, datetime.now(UTC)) if ends_lifetime else {}
        return fleet.record(
            row.id, State.STOPPED, "computer.stopped", said, data, last_error=why, **ended
        )
    return await shutdown(fleet, row, why, ends_lifetime)


async def shutdown(
    fleet: Fleet, row: ComputerRow, why: str | None = None, ends_lifetime: bool = False
) -> ComputerRow:
    host = fleet.host_of(row)
    # ended as the stop begins, so an interrupted one ends it too (as a pause that ends it)
    ending: dict[str, Any] = {"pause_ended_lifetime": True} if ends_lifetime else {}
    fleet.record(row.id, State.STOPPING, "computer.stopping", "shutting down", **ending)
    await fleet.network_down(row.id)
    machine = fleet.machines.pop(row.id, None)
    clean = False
    if machine is None:
        with contextlib.suppress(HostError, OSError):
            machine = await host.attach(row.id)
    try:
        if machine is not None:
            clean = await host.shutdown(machine)
        else:
            await host.kill(row.id)
    except HostError as exc:  # its VM may still run: never said stopped
        log.warning("stop of %s failed: %s", row.id, exc)
        why = "its VM did not end"
        fleet.record(
            row.id,
            State.ERROR,
            "computer.error",
            f"stop failed: {why}",
            last_error=f"stop failed: {why}",
        )
        raise failed("stop", why, "the computer is in error: stop or delete it again") from exc
    how = "clean shutdown" if clean else "the VM was killed after the shutdown timeout"
    said = f"{why or 'stopped'} ({how}); memory dropped, disk kept"
    ended = deadlines.ended_by_pause(row, datetime.now(UTC)) if ends_lifetime else {}
    return fleet.record(
        row.id,
        State.STOPPED,
        "computer.stopped",
        said,
        {"clean": clean, **({"why": why} if why else {})},
        last_error=why,
        **ended,
    )


async def restart(fleet: Fleet, org: Org, ref: str) -> ComputerRow:
    return await carried_through(fleet, "restart", _restart(fleet, org, ref))


async def _restart(fleet: Fleet, org: Org, ref: str) -> ComputerRow:
    async with fleet.acting(org, ref, "restart") as row:
        if row.state == State.RUNNING:
            row = await shutdown(fleet, row)
        return await boot(fleet, row, "restarted: a restart boots fresh")


@dataclass(frozen=True)
class Change:
    """What a PATCH changes (None: left as it is)."""

    idle_timeout: int | None = None
    lifetime: int | None = None  # seconds from its creation; 0: none
    on_lifetime: str | None = None  # stop | delete
    max_running: int | None = None  # seconds from its last start; 0: none


async def update(fleet: Fleet, org: Org, ref: str, change: Change) -> ComputerRow:
    row = fleet.get(org, ref)
    fields = {k: v for k, v in asdict(change).items() if v is not None}
    if not fields:
        return row
    if change.idle_timeout is not None and change.idle_timeout < 0:
        raise InvalidRequestError("idle_timeout is seconds, 0 (never) or more")
    deadlines.check(change.lifetime, change.on_lifetime, change.max_running)
    if change.idle_timeout is not None:
        fleet.touch(row.id)
    said = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fields.items())
    # a lifetime given replaces one a pause ended: it counts at rest too
    given = {"pause_ended_lifetime": False} if change.lifetime is not None else {}
    return fleet.record(row.id, None, "computer.updated", said, fields, **fields, **given)


async def destroy_locked(fleet: Fleet, computer_id: str, why: str = "deleted") -> None:
    """A computer gone, under its lock: network, VM, folder, the disk layers only it stood on,
    then its record (its last event says `why`)."""
    row = fleet.by_id(computer_id)
    if row is not None and fleet.remote is not None and fleet.remote.forgotten(row.host_id):
        # its host was forgotten as dead: its record goes; should the host come back, it is
        # told the set it should run, and this computer's VM is stopped and set aside there
        fleet.remove_record(computer_id, f"{why} (its host was forgotten: nothing on it touched)")
        return
    host = fleet.host_of(row) if row is not None else fleet.runtime
    await fleet.network_down(computer_id)
    machine = fleet.machines.pop(computer_id, None)
    if machine is not None:
        with contextlib.suppress(Exception):
            await machine.agent.close()
    await host.destroy(computer_id)  # raises if anything of it stays
    await host.gc_layers()
    fleet.remove_record(computer_id, why)


async def delete(fleet: Fleet, org: Org, ref: str, why: str = "deleted") -> ComputerRow:
    return await carried_through(fleet, "delete", _delete(fleet, org, ref, why))


async def _delete(fleet: Fleet, org: Org, ref: str, why: str) -> ComputerRow:
    async with fleet.acting(org, ref, "delete") as row:
        return await delete_locked(fleet, row, why)


async def delete_locked(fleet: Fleet, row: ComputerRow, why: str = "deleted") -> ComputerRow:
    """Delete a computer under its operation; its record stays, in error, if anything of it
    could not be removed."""
    if fleet.remote is None or not fleet.remote.forgotten(row.host_id):
        fleet.host_of(row)  # a fleet host that does not answer: nothing changes
    row = fleet.record(row.id, State.DELETING, "computer.deleting", "deleting")
    try:
        await destroy_locked(fleet, row.id, why)
    except HostError as exc:  # its record stays, in error: a second delete tries again
        log.warning("delete of %s failed: %s", row.id, exc)
        why = "its VM or files could not be removed"
        fleet.record(
            row.id,
            State.ERROR,
            "computer.error",
            f"delete failed: {why}",
            last_error=f"delete failed: {why}",
        )
        raise failed("delete", why, "the computer is in error: delete it again") from exc
    row.state = State.DELETED
    return row
