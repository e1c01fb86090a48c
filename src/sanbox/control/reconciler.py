"""The reconciler: VM processes outlive the server. On start it re-attaches to computers that
still run, records the ones whose VM died as stopped (disk kept), finishes or undoes transitions a
crash interrupted (a create interrupted by `kill -9` ends as a working computer or as nothing), and
removes orphans. While the server runs, it watches running computers for VMs that die, and for
VMs a disk error stopped (a full data filesystem): those go to `error` with the reason, never left
`running`, while the other computers run on."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime

from ..fleet import reservations
from ..host.door import GIB, HostError, VmHandle
from ..store import repo
from ..store.models import utcnow
from . import build_run, build_vms
from .computers import Computers
from .quotas import COMPUTE
from .states import State
from .usage import ledger as usage
from .vm_watcher import disk_error, disk_failed

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    reattached: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    snapshots_dropped: list[str] = field(default_factory=list)
    continued: list[str] = field(default_factory=list)  # found frozen by a save: run again


class Reconciler:
    def __init__(self, computers: Computers) -> None:
        self.fleet = computers.fleet
        self.runtime = computers.fleet.runtime

    async def reconcile(self) -> ReconcileReport:
        report = ReconcileReport()
        left = self.fleet.operations.abandon_node(self.fleet.node)  # nothing of it runs now
        if left:
            log.warning("%d operations this node left incomplete when it ended: abandoned", left)
        held = reservations.abandon_node(self.fleet.db, self.fleet.node)
        if held:
            log.warning("%d host reservations this node left held when it ended: released", held)
        with self.fleet.db.session() as s:
            every = repo.list_computers(s, None)
        known = {row.id for row in every}
        rows = [row for row in every if row.host_id is None]  # a fleet host reconciles its own
        with self.fleet.db.session() as s:
            usage.adopt(s)  # computers made before metering get an interval from now
        for row in rows:
            try:
                with usage.ending_at(self._proven(row.id, State(row.state))):
                    await self._one(row.id, State(row.state), row.identity_pending, report)
            except Exception:  # one bad computer must not stop the others
                log.exception("reconcile of %s failed", row.id)
        report.orphans += await self.runtime.sweep(known)
        self._builds()
        # the build VMs its previous life left: their quota freed, their usage closed where last
        # seen, before the meter runs (one whose fleet host does not answer: the watcher's)
        await build_vms.end_left(self.fleet, utcnow())
        await self._snapshots(report)
        return report

    def _proven(self, computer_id: str, state: State) -> datetime | None:
        """For a computer with compute whose VM is gone: the last moment its usage interval was
        seen to hold. Whatever the reconcile records for it closes that interval there, not now
        (the time no server watched is not counted as compute; none is counted twice)."""
        if state not in COMPUTE or self.runtime.attach_vm(computer_id) is not None:
            return None
        with self.fleet.db.session() as s:
            return usage.proven_until(s, computer_id)

    def _builds(self) -> None:
        """A build the server did not finish failed (its computer went as an orphan above). One
        another API node runs (its operation is incomplete: this node's own were abandoned
        before) is that node's."""
        with self.fleet.db.session() as s:
            for row in repo.list_templates(s, None):
                if row.state == "building" and not build_run.running(self.fleet, row.id):
                    row.state = "ready" if row.snapshot_id is not None else "failed"
                    row.error = "the server stopped during the build: build it again"

    async def _snapshots(self, report: ReconcileReport) -> None:
        """A snapshot whose take the server did not finish is dropped, files and record: its
        caller was never told it exists. So are snapshot folders without a record (and, through
        the collect that follows, half-made folders and layers nothing references). One that
        another API node is taking (its computer's operation is incomplete: this node's own were
        abandoned before, so a snapshot operation is another's) is that node's."""
        fleet = self.fleet
        taking: set[str] = set()
        with fleet.db.session() as s:
            rows = repo.list_snapshots(s, None, state=None)
            for row in rows:
                if row.state != "creating":
                    continue
                op = fleet.operations.incomplete(row.computer_id)
                if op is not None and op.kind == "snapshot":  # another node's take
                    taking.add(row.id)
                elif build_run.running_named(fleet, row.org_id, row.template):
                    taking.add(row.id)  # a layer another node's build is taking
                else:
                    ev = repo.add_event(
                        s,
                        row.org_id,
                        row.computer_id,
                        "snapshot.failed",
                        f"snapshot {row.id} dropped: the server stopped while it was being taken",
                        {"snapshot": row.id},
                    )
                    s.delete(row)
                    fleet.bus.publish(ev)
                    report.snapshots_dropped.append(row.id)
        ready = {row.id for row in rows if row.state != "creating"}  # ready, or a build's layer
        ready |= taking
        for snapshot_id in self.runtime.snapshot_ids():
            if snapshot_id not in ready:
                try:
                    await self.runtime.delete_snapshot(snapshot_id)
                except HostError as exc:
                    log.warning("snapshot %s without a record stays: %s", snapshot_id, exc)
                    continue
                if snapshot_id not in report.snapshots_dropped:
                    report.orphans.append(snapshot_id)
        await self.runtime.gc_layers()

    async def _attach(self, computer_id: str) -> bool:
        try:
            machine = await self.runtime.attach(computer_id)
        except Exception:  # a VM whose agent never answers is not usable
            machine = None
        if machine is None:
            return False
        self.fleet.machines[computer_id] = machine
        await self.fleet.network_up(computer_id)
        return True

    async def _one(
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
                    "running: its create completed across a server restart",
                    isolation=machine.isolation,
                    identity_pending=None,
                )
                report.reattached.append(computer_id)
                return
            # a fork is all or none, and its caller was never answered: none
            why = "its fork was interrupted" if pending == "fork" else str(state)
            await self._remove(computer_id, f"removed: the server stopped while {why}", report)
        elif state in (State.RUNNING, State.STARTING):
            vm = self.runtime.attach_vm(computer_id)
            if vm is not None and (error := await disk_error(vm)) is not None:
                await disk_failed(fleet, computer_id, error)  # stopped on a disk error meanwhile
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
                    "re-attached to its running VM after a server restart",
                    isolation=machine.isolation,
                    identity_pending=None,
                )
                report.reattached.append(computer_id)
            else:
                await fleet.vm_exited(computer_id, "its VM was gone when the server restarted")
                report.stopped.append(computer_id)
        elif state == State.STOPPING:
            await self.runtime.kill(computer_id)
            fleet.record(
                computer_id,
                State.STOPPED,
                "computer.stopped",
                "stopped (the server restarted during its shutdown); disk kept",
            )
            report.stopped.append(computer_id)
        elif state in (State.PAUSING, State.RESUMING):
            await self._interrupted_rest(computer_id, state, report)
        else:  # stopped, error, paused, suspended: no VM may run (saved memory stays on disk)
            await self.runtime.kill(computer_id)

    async def _remove(self, computer_id: str, why: str, report: ReconcileReport) -> None:
        """A computer that never became one: VM, files and record gone (its event says why)."""
        self.fleet.machines.pop(computer_id, None)
        await self.fleet.network_down(computer_id)
        await self.runtime.destroy(computer_id)
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
            await self.runtime.finish_copy(machine, row.name, row.disk_gib * GIB)
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

    async def _interrupted_rest(
        self, computer_id: str, state: State, report: ReconcileReport
    ) -> None:
        """A pause or resume the server did not finish: run on if the VM lives (any memory it
        saved dropped first: its disk moves on from here), else keep the saved memory if it is
        complete, else the computer is stopped (disk kept). What the unfinished save left in the
        state dir goes when the VM runs on or the computer is stopped."""
        fleet = self.fleet
        vm = self.runtime.attach_vm(computer_id)
        if vm is not None:
            await self.runtime.drop_saved_memory(computer_id)
            with contextlib.suppress(Exception):
                await vm.continue_running()
            if await self._attach(computer_id):
                fleet.record(
                    computer_id,
                    State.RUNNING,
                    "computer.running",
                    f"running: the server restarted while it was {state}",
                )
                report.reattached.append(computer_id)
                return
        await self.runtime.kill(computer_id)
        if self.runtime.has_saved_memory(computer_id):
            why = f"paused: the server restarted while it was {state}; memory is saved"
            fleet.record(computer_id, State.PAUSED, "computer.paused", why)
        else:
            await self.runtime.drop_saved_memory(computer_id)  # what an unfinished save left
            fleet.record(
                computer_id,
                State.STOPPED,
                "computer.stopped",
                f"stopped: the server restarted while it was {state}; memory lost, disk kept",
            )
        report.stopped.append(computer_id)
