"""Transitions nothing carries on any more, settled as one: at server start by the reconciler
(every computer of this server's own host, whatever its state), and while the server runs by the
VM watcher's sweep (`settle_left`: a computer left `starting`, `stopping`, `pausing` or
`resuming` with no incomplete operation, on any host). A create interrupted ends as a working
computer or as nothing; a start as running if its VM runs, else stopped; a stop as stopped; a
pause or a resume as running if its VM runs, else as the rest it was going to or came from
(`paused`, `suspended`: the record's `rest_state`) if its saved memory is whole, else stopped."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from sqlalchemy import select

from ..fleet.errors import BusyError, HostForgottenError
from ..host.door import GIB, Host, HostError, VmHandle
from ..store.models import ComputerRow
from .disk_stop import disk_error, disk_failed, disk_failed_locked
from .errors import HostUnavailableError
from .fleet import Fleet
from .states import State

log = logging.getLogger(__name__)

# on their way with nothing else to end them (creating and deleting have their own owners: a
# create's provision, a delete that a second delete tries again)
LEFT = frozenset({State.STARTING, State.STOPPING, State.PAUSING, State.RESUMING})


@dataclass
class ReconcileReport:
    reattached: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    snapshots_dropped: list[str] = field(default_factory=list)
    continued: list[str] = field(default_factory=list)  # found frozen by a save: run again


async def settle_left(fleet: Fleet) -> ReconcileReport:
    """Settle every computer left on its way (`LEFT`) with no incomplete operation: under an
    operation of its own (one begun meanwhile is that one's), read again there. A computer
    whose host does not answer waits for a later sweep."""
    report = ReconcileReport()
    with fleet.db.session() as s:
        rows = list(
            s.scalars(select(ComputerRow).where(ComputerRow.state.in_([str(x) for x in LEFT])))
        )
    for row in rows:
        if fleet.operations.incomplete(row.id) is not None:
            continue
        try:
            async with fleet.operating(row.id, "settle", row.host_id):
                now = fleet.by_id(row.id)
                if now is None or now.state not in LEFT or now.host_id != row.host_id:
                    continue
                log.warning("%s was left %s, nothing carrying it on: settled", row.id, now.state)
                gone = Interrupted(fleet, fleet.host_of(now), "nothing carried it on", locked=True)
                await gone.settle(now.id, State(now.state), now.identity_pending, report)
        except (BusyError, HostError, HostUnavailableError, HostForgottenError):
            continue  # acted on elsewhere, or its host is silent (or gone): a later sweep
        except Exception:  # one bad computer must not stop the others
            log.exception("settling %s failed", row.id)
    return report


class Interrupted:
    """Settles the computers of one `host` whose transition was interrupted by `cause` (said in
    their events: "the server restarted"); `locked`: the caller holds each one's operation."""

    def __init__(self, fleet: Fleet, host: Host, cause: str, locked: bool = False) -> None:
        self.fleet = fleet
        self.host = host
        self.cause = cause
        self.locked = locked

    async def settle(
        self, computer_id: str, state: State, pending: str | None, report: ReconcileReport
    ) -> None:
        fleet = self.fleet
        if state in (State.CREATING, State.DELETING):
            if state == State.CREATING and pending != "fork" and await self._attach(computer_id):
                if pending is not None and not await self._finish_copy(computer_id, report):
                    return
                machine = fleet.machines[computer_id]
                fleet.record(
                    computer_id,
                    State.RUNNING,
                    "computer.running",
                    f"running: its create completed after {self.cause}",
                    isolation=machine.isolation,
                    identity_pending=None,
                )
                report.reattached.append(computer_id)
                return
            # a fork is all or none, and its caller was never answered: none
            why = "its fork was interrupted" if pending == "fork" else str(state)
            await self._remove(computer_id, f"removed: {self.cause} while {why}", report)
        elif state in (State.RUNNING, State.STARTING):
            await self._running(computer_id, state, pending, report)
        elif state == State.STOPPING:
            await self.host.kill(computer_id)
            fleet.record(
                computer_id,
                State.STOPPED,
                "computer.stopped",
                f"stopped ({self.cause} during its shutdown); disk kept",
            )
            report.stopped.append(computer_id)
        elif state in (State.PAUSING, State.RESUMING):
            await self._rest(computer_id, state, report)
        else:  # stopped, error, paused, suspended: no VM may run (saved memory stays on disk)
            await self.host.kill(computer_id)

    async def _running(
        self, computer_id: str, state: State, pending: str | None, report: ReconcileReport
    ) -> None:
        """Running if its VM runs (continued if a save left it frozen, a copy given its own
        identity first), `error` if a disk error stopped it, else stopped (disk kept)."""
        fleet = self.fleet
        vm = self.host.attach_vm(computer_id)
        if vm is not None and (error := await disk_error(vm)) is not None:
            if self.locked:  # stopped on a disk error meanwhile
                await disk_failed_locked(fleet, computer_id, error)
            else:
                await disk_failed(fleet, computer_id, error)
            report.stopped.append(computer_id)
            return
        if vm is not None:
            await self._continue_if_frozen(computer_id, vm, report)
        if await self._attach(computer_id):
            if pending is not None and not await self._finish_copy(computer_id, report):
                return
            machine = fleet.machines[computer_id]
            fleet.record(
                computer_id,
                State.RUNNING,
                "computer.reattached",
                f"re-attached to its running VM: {self.cause} while it was {state}",
                isolation=machine.isolation,
                identity_pending=None,
            )
            report.reattached.append(computer_id)
        else:
            await fleet.vm_exited(computer_id, f"its VM was gone when {self.cause}")
            report.stopped.append(computer_id)

    async def _attach(self, computer_id: str) -> bool:
        """Hold a machine for its running VM: the one this node holds already if its agent is
        still connected (a VM's agent channel takes one connection at a time under QEMU: a
        second waited unanswered, and the VM was taken for one whose agent never answers), else
        one attached now, any closed one let go first."""
        held = self.fleet.machines.get(computer_id)
        if held is not None and held.vm.alive() and not held.agent.closed:
            await self.fleet.network_up(computer_id)
            return True
        if held is not None:
            del self.fleet.machines[computer_id]
            with contextlib.suppress(Exception):
                await held.agent.close()
        try:
            machine = await self.host.attach(computer_id)
        except Exception:  # a VM whose agent never answers is not usable
            machine = None
        if machine is None:
            return False
        self.fleet.machines[computer_id] = machine
        await self.fleet.network_up(computer_id)
        return True

    async def _remove(self, computer_id: str, why: str, report: ReconcileReport) -> None:
        """A computer that never became one: VM, files and record gone (its event says why)."""
        self.fleet.machines.pop(computer_id, None)
        await self.fleet.network_down(computer_id)
        await self.host.destroy(computer_id)
        self.fleet.remove_record(computer_id, why)
        report.removed.append(computer_id)

    async def _continue_if_frozen(
        self, computer_id: str, vm: VmHandle, report: ReconcileReport
    ) -> None:
        """A running computer whose vCPUs the host stopped (a snapshot's or fork's save the
        server did not finish) runs on: continued, never killed."""
        if await vm.frozen() is not True:
            return
        try:
            await vm.continue_running()
        except HostError as exc:  # it cannot run on: attaching finds it unusable, and says so
            log.warning("%s was left frozen and could not be continued: %s", computer_id, exc)
            return
        self.fleet.record(
            computer_id,
            None,
            "computer.continued",
            "its vCPUs, stopped for a snapshot or fork the server did not finish, run again",
        )
        report.continued.append(computer_id)

    async def _finish_copy(self, computer_id: str, report: ReconcileReport) -> bool:
        """A copy (restored, forked, claimed) the server stopped before it had its own identity:
        given it now, or, if that fails, destroyed, never adopted with another's identity."""
        fleet = self.fleet
        row = fleet.by_id(computer_id)
        machine = fleet.machines[computer_id]
        assert row is not None
        try:
            await self.host.finish_copy(machine, row.name, row.disk_gib * GIB)
        except Exception as exc:  # agent, host or guest: the copy is not made its own
            log.warning("%s could not be given its identity after a restart: %s", computer_id, exc)
            with contextlib.suppress(Exception):
                await machine.agent.close()
            await self._remove(
                computer_id,
                "removed: the server stopped before it had its own "
                "identity, and giving it one failed",
                report,
            )
            return False
        await fleet.trust_secrets(computer_id, machine)
        fleet.record(
            computer_id,
            None,
            "computer.identity",
            "given its own identity: the server stopped before it had it",
        )
        return True

    async def _rest(self, computer_id: str, state: State, report: ReconcileReport) -> None:
        """A pause or resume not finished: run on if the VM lives (any memory it saved dropped
        first: its disk moves on from here), else keep the saved memory if it is complete, at
        the rest the pause was going to or the resume came from, else the computer is stopped
        (disk kept). What the unfinished save left in the state dir goes when the VM runs on or
        the computer is stopped."""
        fleet, host = self.fleet, self.host
        vm = host.attach_vm(computer_id)
        if vm is not None:
            await host.drop_saved_memory(computer_id)
            with contextlib.suppress(Exception):
                await vm.continue_running()
            if await self._attach(computer_id):
                fleet.record(
                    computer_id,
                    State.RUNNING,
                    "computer.running",
                    f"running: {self.cause} while it was {state}",
                )
                report.reattached.append(computer_id)
                return
        await host.kill(computer_id)
        if host.has_saved_memory(computer_id):
            row = fleet.by_id(computer_id)
            rest = State.SUSPENDED if row and row.rest_state == State.SUSPENDED else State.PAUSED
            woken = " (woken by its next use)" if rest == State.SUSPENDED else ""
            why = f"{rest}{woken}: {self.cause} while it was {state}; memory is saved"
            fleet.record(computer_id, rest, f"computer.{rest}", why)
        else:
            await host.drop_saved_memory(computer_id)  # what an unfinished save left
            fleet.record(
                computer_id,
                State.STOPPED,
                "computer.stopped",
                f"stopped: {self.cause} while it was {state}; memory lost, disk kept",
            )
        report.stopped.append(computer_id)
