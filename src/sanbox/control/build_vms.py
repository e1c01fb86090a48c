"""The VMs template builds run (the build VM and its readiness VM), recorded while they run
(`build_vms`, written before the VM is made): the record holds the VM's room in its org's quota
(checked in the transaction that writes it, as a create's record is, so builds and creates
cannot together pass a quota) and opens its usage interval (kind `build`: usage/ledger.py),
which its removal closes. On fleet hosts every node's egress watch keeps their egress
(`fleet_egress.py`), and no host's settling takes one for a stranger (`hosts.py`). A node that
starts again destroys what its previous life left (`end_left`), its usage closed where it was last
seen."""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import select

from ..fleet.errors import HostForgottenError
from ..host.door import GIB, Host, Image, MachineSpec
from ..store import Database
from ..store.fleet_models import BuildVmRow
from ..templates.spec import Spec
from . import build_layers, quotas
from .usage import ledger

if TYPE_CHECKING:
    from .capacity import Capacity, Hold
    from .fleet import Fleet


log = logging.getLogger(__name__)

BUILD_MEMORY_MIB = 1024  # a build VM's least memory


@dataclass(frozen=True)
class BuildVm:
    """A build's VM as its org's quota and usage see it (`host_id` None: this server's own)."""

    id: str
    org_id: str
    template: str
    host_id: str | None
    node: str
    vcpus: int
    memory_mib: int
    disk_gib: int

    @classmethod
    def of(
        cls,
        mspec: MachineSpec,
        image: Image,
        org_id: str,
        template: str,
        host_id: str | None,
        node: str,
    ) -> BuildVm:
        """The VM `mspec` describes, booted from `image`, for a build of the org's template."""
        disk = mspec.disk_gib or disk_of(image)
        vm = mspec.computer_id, org_id, template, host_id, node
        return cls(*vm, mspec.vcpus, mspec.memory_mib, disk)

    def use(self) -> quotas.Use:
        return quotas.Use.computer(self.vcpus, self.memory_mib, self.disk_gib)


def build_memory(spec: Spec) -> int:
    """A build VM's memory: package installs need room, whatever the template's computers get."""
    return max(BUILD_MEMORY_MIB, spec.memory_mib)


def disk_of(image: Image) -> int:
    """A build's VM disk when its spec names none: its image's, in GiB rounded up."""
    return -(-image.disk_size_bytes // GIB)


def needs(spec: Spec, image: Image, host_cpus: int, starts_from: int = 0) -> quotas.Use:
    """The most a build holds of its org's quota at once: one VM (the build VM, then the
    readiness VM), as large in each as the larger of the two, its disk at least the one it
    starts from (`starts_from` GiB), and the room its ready snapshot's memory image holds."""
    vcpus = max(build_vcpus(host_cpus), spec.vcpus)
    disk = max(spec.disk_gib or disk_of(image), starts_from)
    ready = -(-build_layers.ready_bytes(spec.memory_mib) // GIB)
    return quotas.Use.computer(vcpus, build_memory(spec), disk + ready)


def admitted(
    capacity: Capacity, host: Host, mspec: MachineSpec, image: Image, memory: bool
) -> Hold:
    """Room on the build host's data filesystem for a snapshot of the build computer (a step's
    layer, or the ready snapshot with `memory`), held while it is taken, as a computer's
    snapshot is (`Capacity.admit_snapshot`): the computer goes on on a new overlay promised its
    disk's full size, and a spec with many steps writes that many layers. Refused:
    `InsufficientStorageError` before anything is written."""
    disk = mspec.disk_gib or disk_of(image)
    return capacity.admit_snapshot(host, mspec.computer_id, disk, mspec.memory_mib if memory else 0)


def room_for_a_layer(db: Database, org_id: str) -> None:
    """A build step's layer stays, in its org's disk quota: room for a GiB more of it (the
    layers written so far counted), else `quotas.QuotaExceededError`."""
    with db.session() as s:
        quotas.check(s, org_id, quotas.Use(disk_gib=1))


def build_vcpus(host_cpus: int) -> int:
    """A build VM's vCPUs: two at most (installs are mostly one process), a core of the host left
    to the rest: a guest with more vCPUs than the host runs at once stalls in its own
    spinlocks."""
    return max(1, min(2, host_cpus - 1))


@contextlib.contextmanager
def recorded(db: Database, vm: BuildVm) -> Iterator[None]:
    """The build VM's record for the block, written in the transaction that checks its org's
    quota for it: `quotas.QuotaExceededError` before anything is made."""
    with db.session() as s:
        quotas.check(s, vm.org_id, vm.use())
        s.add(
            BuildVmRow(
                id=vm.id,
                org_id=vm.org_id,
                template=vm.template,
                host_id=vm.host_id,
                node=vm.node,
                vcpus=vm.vcpus,
                memory_mib=vm.memory_mib,
                disk_gib=vm.disk_gib,
            )
        )
    try:
        yield
    finally:
        _forget(db, vm.id)


def _forget(db: Database, vm_id: str) -> None:
    """Remove the record (one by one, not in bulk: the ledger's hook closes its interval)."""
    with db.session() as s:
        row = s.get(BuildVmRow, vm_id)
        if row is not None:
            s.delete(row)


def on_host(db: Database, host_id: str) -> set[str]:
    with db.session() as s:
        return set(s.scalars(select(BuildVmRow.id).where(BuildVmRow.host_id == host_id)))


def running(db: Database) -> dict[str, list[str]]:
    """Every recorded build VM on a fleet host, by host id."""
    found: dict[str, list[str]] = defaultdict(list)
    with db.session() as s:
        for vm_id, host_id in s.execute(select(BuildVmRow.id, BuildVmRow.host_id)):
            if host_id is not None:
                found[host_id].append(vm_id)
    return found


async def end_left(fleet: Fleet, before: datetime) -> int:
    """Destroy the build VMs this node's previous life (recorded `before` this one began) left
    (none of its builds runs now) and forget them, their usage closed where it was last seen to
    hold; one whose host does not answer keeps its record until the next time. How many went."""
    with fleet.db.session() as s:
        left = s.execute(
            select(BuildVmRow.id, BuildVmRow.host_id).where(
                BuildVmRow.node == fleet.node, BuildVmRow.created_at < before
            )
        ).all()
    return sum([await _end(fleet, vm_id, host_id) for vm_id, host_id in left])


async def end_unheld(fleet: Fleet, building: Callable[[str, str], bool]) -> int:
    """End the build VMs of builds nobody runs any more (`building(org, template)` is False: the
    API node that ran the build gave no sign of life, and its operation was swept): on a fleet
    host, destroyed there (one whose host does not answer: next time; one whose host was
    forgotten: forgotten); on another node's own host, forgotten (its VMs went with that node,
    whose next start sweeps them); their usage closed where it was last seen. How many went."""
    with fleet.db.session() as s:
        c = BuildVmRow.__table__.c
        found = s.execute(select(c.id, c.host_id, c.node, c.org_id, c.template)).all()
    gone = 0
    for vm_id, host_id, node, org_id, template in found:
        if building(org_id, template):
            continue
        if host_id is None and node != fleet.node:
            gone += _forget_where_seen(fleet.db, vm_id)
        else:
            gone += await _end(fleet, vm_id, host_id)
    return gone


async def _end(fleet: Fleet, vm_id: str, host_id: str | None) -> int:
    """Destroy a build VM on its host and forget it (1), or leave it for the next time (0)."""
    try:
        await fleet.host_at(host_id).destroy(vm_id)
    except HostForgottenError:  # gone for good, and the VM with it
        pass
    except Exception as exc:  # its host does not answer now
        log.warning("build VM %s left on host %s stays for now: %s", vm_id, host_id, exc)
        return 0
    return _forget_where_seen(fleet.db, vm_id)


def _forget_where_seen(db: Database, vm_id: str) -> int:
    """Forget the record, its usage closed where it was last seen to hold."""
    with db.session() as s:
        seen = ledger.proven_until(s, vm_id)
    with ledger.ending_at(seen):
        _forget(db, vm_id)
    return 1
