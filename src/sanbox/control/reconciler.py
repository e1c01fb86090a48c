"""The reconciler: VM processes outlive the server. On start it re-attaches to computers that
still run, records the ones whose VM died as stopped (disk kept), finishes or undoes transitions a
crash interrupted (interrupted.py: a create interrupted by `kill -9` ends as a working computer or
as nothing), and removes orphans. While the server runs, the VM watcher (vm_watcher.py) watches
running computers for VMs that die or that a disk error stopped, and settles computers left on
their way with nothing carrying them on."""

from __future__ import annotations

import logging
from datetime import datetime

from ..fleet import reservations
from ..host.door import HostError
from ..store import repo
from ..store.models import utcnow
from . import build_run, build_vms
from .computers import Computers
from .interrupted import Interrupted, ReconcileReport
from .quotas import COMPUTE
from .states import State
from .usage import ledger as usage

log = logging.getLogger(__name__)


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
        gone = Interrupted(self.fleet, self.runtime, "the server restarted")
        for row in rows:
            try:
                with usage.ending_at(self._proven(row.id, State(row.state))):
                    await gone.settle(row.id, State(row.state), row.identity_pending, report)
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
