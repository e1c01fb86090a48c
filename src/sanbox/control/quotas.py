"""Quotas per org: what it may use at once, set by a host admin (`sanbox org quota`). None is
no limit, and an org without a quota is never refused by one.

- running: computers with compute (creating, starting, running, pausing, resuming, stopping)
  and the VMs its template builds run (a build VM, then its readiness VM: `build_vms.py`);
  vcpus and memory_mib are theirs. Warm-pool members are the pool owner's computers: they count.
- disk_gib: the disks of every computer of the org, in any state, and of its build VMs while
  they run, and the bytes its template builds' layers hold (state `layer`: the org's build cache,
  and each template's ready snapshot, its memory image too), their sum rounded up to a GiB. A
  layer being taken holds what its record says: a ready snapshot's, its memory's room from
  before its computer boots (`build_layers.py`).
- snapshots: the org's snapshots (being taken or ready; not a template's build layers).

`check` runs inside the transaction that writes what would exceed the quota (the record a create,
a fork or a pool refill inserts; the move to `starting` or `resuming`; the snapshot's record; a
build VM's record), so
what it counts includes everything admitted before it: in this process transactions are
synchronous and never interleave, and on PostgreSQL the org's row is locked (`FOR UPDATE`) so
other servers wait for it. Concurrent creates can never together exceed a quota."""

from __future__ import annotations

from dataclasses import dataclass, fields

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ..store.fleet_models import BuildVmRow
from ..store.models import ComputerRow, Org, QuotaRow, SnapshotRow
from .errors import ForbiddenError
from .states import State

# the states in which a computer holds compute (a VM, or one being made or ended)
COMPUTE = frozenset(
    {State.CREATING, State.STARTING, State.RUNNING, State.PAUSING, State.RESUMING, State.STOPPING}
)
MAX_LIMIT = 1_000_000  # the largest value any limit may be set to
GIB = 1 << 30

_WHAT = {
    "running": ("running computers", ""),
    "vcpus": ("running vCPUs", ""),
    "memory_mib": ("running memory", " MiB"),
    "disk_gib": ("disk allocated", " GiB"),
    "snapshots": ("snapshots", ""),
}
_FLAG = {
    "running": "--running",
    "vcpus": "--vcpus",
    "memory_mib": "--memory",
    "disk_gib": "--disk",
    "snapshots": "--snapshots",
}


@dataclass(frozen=True)
class Quota:
    """Limits (None: none)."""

    running: int | None = None
    vcpus: int | None = None
    memory_mib: int | None = None
    disk_gib: int | None = None
    snapshots: int | None = None

    @classmethod
    def of(cls, row: QuotaRow | None) -> Quota:
        if row is None:
            return cls()
        return cls(row.running, row.vcpus, row.memory_mib, row.disk_gib, row.snapshots)

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


@dataclass(frozen=True)
class Use:
    """What an org uses, or what an operation adds."""

    running: int = 0
    vcpus: int = 0
    memory_mib: int = 0
    disk_gib: int = 0
    snapshots: int = 0

    @classmethod
    def computer(cls, vcpus: int, memory_mib: int, disk_gib: int, count: int = 1) -> Use:
        """`count` new computers with compute and disks."""
        return cls(count, vcpus * count, memory_mib * count, disk_gib * count)

    @classmethod
    def compute(cls, row: ComputerRow) -> Use:
        """A computer coming back to compute (a start, a resume): its disk is counted already."""
        return cls(1, row.vcpus, row.memory_mib)


class QuotaExceededError(ForbiddenError):
    """403 `quota_exceeded`: refused by policy until the org uses less or a host admin raises
    the quota; waiting alone does not clear it (not 429, which clients retry on their own)."""

    code = "quota_exceeded"

    def __init__(self, org: str, quota: str, limit: int, used: int, adding: int) -> None:
        what, unit = _WHAT[quota]
        super().__init__(
            f"quota exceeded: org {org}'s {what} quota is {limit}{unit}, it uses {used}{unit} and "
            f"this needs {adding}{unit} more. Stop or delete something, or ask a host admin to "
            f"raise it (`sanbox org quota {org} {_FLAG[quota]} N`)",
            "quota_exceeded",
        )
        self.quota, self.limit, self.used = quota, limit, used


def refusal(org: str, quota: Quota, use: Use, adding: Use) -> QuotaExceededError | None:
    """The first quota `adding` would take `use` past (pure), or None."""
    for f in fields(Quota):
        limit, more = getattr(quota, f.name), getattr(adding, f.name)
        if limit is not None and more > 0 and getattr(use, f.name) + more > limit:
            return QuotaExceededError(org, f.name, limit, getattr(use, f.name), more)
    return None


def get(s: Session, org_id: str) -> Quota:
    return Quota.of(s.get(QuotaRow, org_id))


def use(s: Session, org_id: str) -> Use:
    """What the org uses now, as this transaction sees it."""
    sums = select(
        func.count(),
        func.coalesce(func.sum(ComputerRow.vcpus), 0),
        func.coalesce(func.sum(ComputerRow.memory_mib), 0),
    ).where(ComputerRow.org_id == org_id, ComputerRow.state.in_(COMPUTE))
    running, vcpus, memory = s.execute(sums).one()
    disk = s.scalar(
        select(func.coalesce(func.sum(ComputerRow.disk_gib), 0)).where(ComputerRow.org_id == org_id)
    )
    builds = select(
        func.count(),
        func.coalesce(func.sum(BuildVmRow.vcpus), 0),
        func.coalesce(func.sum(BuildVmRow.memory_mib), 0),
        func.coalesce(func.sum(BuildVmRow.disk_gib), 0),
    ).where(BuildVmRow.org_id == org_id)
    b_running, b_vcpus, b_memory, b_disk = s.execute(builds).one()
    of_computers = SnapshotRow.computer_id.startswith("cmp_")  # a build's: `bld-`
    built = or_(  # being taken too: its record holds its room (build_layers.py)
        SnapshotRow.state == "layer", (SnapshotRow.state == "creating") & ~of_computers
    )
    layers = s.scalar(
        select(func.coalesce(func.sum(SnapshotRow.size_bytes), 0)).where(
            SnapshotRow.org_id == org_id, built
        )
    )
    taken = or_(  # a template build's layers are `creating` too, then `layer`: not counted
        SnapshotRow.state == "ready", (SnapshotRow.state == "creating") & of_computers
    )
    snaps = s.scalar(select(func.count()).where(SnapshotRow.org_id == org_id, taken))
    return Use(
        int(running) + int(b_running),
        int(vcpus) + int(b_vcpus),
        int(memory) + int(b_memory),
        int(disk or 0) + int(b_disk) + -(-int(layers or 0) // GIB),
        int(snaps or 0),
    )


def check(s: Session, org_id: str, adding: Use) -> None:
    """QuotaExceededError if `adding` would take the org past a quota; call it in the
    transaction that writes what it adds, before anything is made."""
    quota = get(s, org_id)
    if not quota.any():
        return
    org = s.scalars(select(Org).where(Org.id == org_id).with_for_update()).one()
    error = refusal(org.name, quota, use(s, org_id), adding)
    if error is not None:
        raise error


def set_quota(s: Session, org_id: str, quota: Quota) -> Quota:
    """Replace the org's quota (every field: None clears one)."""
    row = s.get(QuotaRow, org_id)
    if row is None:
        row = QuotaRow(org_id=org_id)
        s.add(row)
    for f in fields(Quota):
        setattr(row, f.name, getattr(quota, f.name))
    s.flush()
    return Quota.of(row)
