"""The watch over running computers while the server runs: a VM that died is recorded as exited
(its computer stopped, disk kept), one a disk error stopped (a full data filesystem) goes to
`error` with the reason, never left `running`, while the other computers run on. This node's own
VMs on every API node; the fleet hosts' computers, the sweep of operations another API node
left running, and of computers left on their way with no operation (interrupted.py), on the node
that holds the reconciler's job. What the server finds at start is the
reconciler's (reconciler.py)."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select

from ..fleet import reservations
from ..fleet.errors import BusyError
from ..fleet.link.vm import RemoteVm
from ..host.door import HostError, Liveness
from ..store.models import ComputerRow, utcnow
from . import build_run, build_vms
from .computers import Computers
from .disk_stop import disk_error, disk_failed
from .interrupted import settle_left
from .jobs import RECONCILER
from .states import State

log = logging.getLogger(__name__)

OPERATION_STALE = 300.0  # an operation not beaten this long: its API node died, not come back
SWEEP_EVERY = 30.0  # seconds between sweeps of stale operations


class VmWatcher:
    def __init__(self, computers: Computers) -> None:
        self.fleet = computers.fleet
        self.began = utcnow()  # this node's life: what its earlier lives left predates it

    async def watch(self, interval: float = 2.0) -> None:
        """Record computers whose VM died, or stopped on a disk error, while the server ran:
        this node's own VMs on every node; the fleet hosts' computers, and the sweep of
        operations another API node stopped beating OPERATION_STALE seconds ago, on the node
        that holds the reconciler's job (control/jobs.py), and then of the builds whose operation
        it abandoned (`build_run.end_abandoned`) and of the computers left on their way with no
        operation (`interrupted.settle_left`)."""
        swept_at = 0.0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            leading = await self.fleet.jobs.holds(RECONCILER)
            await self.check_running(leading)
            if loop.time() - swept_at < SWEEP_EVERY:
                continue
            swept_at = loop.time()
            try:  # every node its own
                await build_vms.end_left(self.fleet, self.began)
            except Exception:  # tried again at the next sweep
                log.exception("ending the build VMs an earlier life of this node left failed")
            if leading:
                stale = self.fleet.operations.sweep_stale(OPERATION_STALE)
                for op in stale:
                    said = "operation %s (%s of %s) abandoned: no sign of its node in %g s"
                    log.warning(said, op.op_id, op.kind, op.computer_id, OPERATION_STALE)
                if released := reservations.sweep_stale(self.fleet.db):
                    log.warning("%d host reservations held too long released", released)
                try:  # builds whose node went: their templates failed, their VMs ended
                    await build_run.end_abandoned(self.fleet)
                except Exception:  # tried again at the next sweep
                    log.exception("ending the builds no API node runs failed")
                try:  # computers left on their way with nothing carrying them on: settled
                    await settle_left(self.fleet)
                except Exception:  # tried again at the next sweep
                    log.exception("settling the computers left on their way failed")

    async def check_running(self, leading: bool = True) -> None:
        """One look at every running machine. Only a VM known to be gone is recorded as exited:
        a look that failed (descriptors exhausted, a transient error) is unknown, and the next
        round looks again. The computers of fleet hosts are looked at only when `leading`."""
        for computer_id, machine in list(self.fleet.machines.items()):
            if isinstance(machine.vm, RemoteVm) or self.fleet.lock(computer_id).locked():
                continue  # a fleet host's: its host agent holds its VM
            try:
                seen = machine.vm.liveness()
                if seen is Liveness.UNKNOWN:
                    log.warning("%s: its VM could not be checked; looking again", computer_id)
                elif seen is Liveness.DEAD:
                    await self.fleet.vm_exited(computer_id, "its VM process exited unexpectedly")
                elif (error := await disk_error(machine.vm)) is not None:
                    await disk_failed(self.fleet, computer_id, error)
            except Exception:
                log.exception("recording the end of %s failed", computer_id)
        if leading:
            running = await asyncio.to_thread(self._running_on_fleet_hosts)
            await asyncio.gather(*(self._check_placed(row) for row in running))

    def _running_on_fleet_hosts(self) -> list[ComputerRow]:
        """The records of running computers placed on fleet hosts (none without a fleet: no
        read)."""
        remote = self.fleet.remote
        if remote is None or not remote.any_joined():
            return []
        with self.fleet.db.session() as s:
            return list(
                s.scalars(
                    select(ComputerRow).where(
                        ComputerRow.host_id.is_not(None), ComputerRow.state == str(State.RUNNING)
                    )
                )
            )

    async def _check_placed(self, row: ComputerRow) -> None:
        """A running computer on a fleet host: its VM gone (by a report read after no
        operation was left on it) is recorded as exited; a disk error, as `error`."""
        remote = self.fleet.remote
        assert remote is not None and row.host_id is not None
        try:
            seen = remote.liveness(row.host_id, row.id)
            if seen is Liveness.UNKNOWN:  # its host is not answering: nothing is known
                return
            if seen is Liveness.ALIVE:
                vm = self.fleet.host_of(row).attach_vm(row.id)
                if vm is not None and (error := await disk_error(vm)) is not None:
                    await disk_failed(self.fleet, row.id, error)
                return
            async with self.fleet.operating(row.id, "vm_check"):
                now = self.fleet.by_id(row.id)
                if now is None or now.state != State.RUNNING or now.host_id != row.host_id:
                    return
                if await remote.liveness_now(row.host_id, row.id) is Liveness.DEAD:
                    await self.fleet.vm_exited(row.id, "its VM process exited unexpectedly")
        except (BusyError, HostError):  # acted on elsewhere, or its host is silent: next round
            return
        except Exception:
            log.exception("looking at %s on its host failed", row.id)
