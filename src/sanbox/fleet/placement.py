"""Placement (E2B's best-of-K): of the hosts of the request's region that are up and can take it
(labels, hypervisor, acceleration, the template build, room left after every reservation),
sample K, score each `max` over vCPU, RAM and disk of (allocated + requested) / capacity (lower
is better; the RAM requested is each VM's guest RAM with what that host counts for its
hypervisor, `vm_overhead_mib` from its reports, as its own admission will count it), and
reserve on the best in the same transaction with a guarded UPDATE (the row is locked and the
guard re-checked, so concurrent placements never over-commit a host). A host that then refuses
for capacity is released and excluded, and another tried: at most 3 tries.

Placement never spills to another region: no room there is `insufficient_capacity`. Work on a
computer whose data is on a host (start, resume, restore, fork, pool claims) goes to that host
(`place_on`), and a region other than the computer's is `region_mismatch` before any write."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection, select, update

from ..control.errors import NotFoundError, UnavailableError
from ..store import Database
from ..store.fleet_models import HostRow
from ..store.models import ComputerRow
from . import reservations
from .errors import HostNotFoundError, InsufficientCapacityError, RegionMismatchError
from .hosts import UP

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    region: str
    vcpus: int
    memory_mib: int
    disk_bytes: int
    labels: Mapping[str, str] = field(default_factory=dict)  # the host must carry all of them
    hypervisor: str | None = None
    accel: str | None = None
    layer: str | None = None  # a template build the host must hold
    vms: int = 1  # VMs it runs there, each counted with the host's hypervisor overhead

    def __post_init__(self) -> None:
        if min(self.vcpus, self.memory_mib, self.disk_bytes, self.vms) < 0:
            raise ValueError("a placement request is not negative")


@dataclass(frozen=True)
class Policy:
    k: int = 3  # hosts sampled per decision
    tries: int = 3  # hosts tried when they refuse for capacity
    vcpu_overcommit: float = 4.0
    disk_overcommit: float = 1.0  # RAM is never overcommitted

    def __post_init__(self) -> None:
        if self.k < 1 or self.tries < 1 or min(self.vcpu_overcommit, self.disk_overcommit) <= 0:
            raise ValueError("a placement policy needs k, tries >= 1 and overcommits > 0")


@dataclass(frozen=True)
class HostLoad:
    """What placement reads of a host."""

    id: str
    name: str
    region: str
    state: str
    labels: Mapping[str, Any]
    hypervisor: str
    accel: str
    layers: Sequence[str]
    vcpus: int
    memory_mib: int
    disk_bytes: int
    alloc_vcpus: int
    alloc_memory_mib: int
    alloc_disk_bytes: int
    vm_overhead_mib: int = 0  # what it counts for a new VM's hypervisor beside its guest's RAM


@dataclass(frozen=True)
class Candidate:
    host_id: str
    name: str
    score: float


@dataclass(frozen=True)
class Placement:
    host_id: str
    host_name: str
    epoch: int
    request: Request
    score: float
    candidates: tuple[Candidate, ...]  # those sampled, best first
    generation: int | None  # the computer's, after this placement (None: no computer given)
    reservation: str = ""  # its record (reservations.py): what `release` gives back

    def event_data(self) -> dict[str, Any]:
        """For the create's event: the chosen host and the candidates considered."""
        return {
            "host": self.host_name,
            "score": round(self.score, 4),
            "candidates": [{"host": c.name, "score": round(c.score, 4)} for c in self.candidates],
        }


class HostRefused(Exception):
    """Raised by a placement's caller when the host refused the work for capacity."""


def eligible(host: HostLoad, req: Request, policy: Policy) -> bool:
    if host.state != UP or host.region != req.region:
        return False
    if any(host.labels.get(k) != v for k, v in req.labels.items()):
        return False
    if req.hypervisor is not None and host.hypervisor != req.hypervisor:
        return False
    if req.accel is not None and host.accel != req.accel:
        return False
    if req.layer is not None and req.layer not in host.layers:
        return False
    if req.vcpus > host.vcpus:  # no computer wider than its host's processors
        return False
    return score(host, req, policy) <= 1.0


def memory_on(host: HostLoad, req: Request) -> int:
    """The RAM `req` takes on `host`: its guests' with their hypervisors' overhead there."""
    return req.memory_mib + req.vms * host.vm_overhead_mib


def score(host: HostLoad, req: Request, policy: Policy) -> float:
    """The host's fullest resource after this request, as a fraction (above 1: does not fit)."""
    return max(
        _frac(host.alloc_vcpus + req.vcpus, host.vcpus * policy.vcpu_overcommit),
        _frac(host.alloc_memory_mib + memory_on(host, req), host.memory_mib),
        _frac(host.alloc_disk_bytes + req.disk_bytes, host.disk_bytes * policy.disk_overcommit),
    )


def choose(
    hosts: Sequence[HostLoad], req: Request, policy: Policy, rng: random.Random
) -> list[Candidate]:
    """K eligible hosts sampled at random, best score first (empty: none can take it)."""
    fit = [h for h in hosts if eligible(h, req, policy)]
    sample = rng.sample(fit, min(policy.k, len(fit)))
    ranked = sorted((score(h, req, policy), h.name, h.id) for h in sample)
    return [Candidate(host_id, name, s) for s, name, host_id in ranked]


def _frac(used: float, capacity: float) -> float:
    return used / capacity if capacity > 0 else float("inf")


_LOAD = [getattr(HostRow, f) for f in HostLoad.__dataclass_fields__]


class Placer:
    def __init__(
        self,
        db: Database,
        policy: Policy | None = None,
        rng: random.Random | None = None,
        node: str | None = None,
    ) -> None:
        self.db = db
        self.policy = policy or Policy()
        self.rng = rng or random.Random()
        self.node = node  # the API node its reservations are held by

    def place(
        self, req: Request, computer_id: str | None = None, exclude: Collection[str] = ()
    ) -> Placement:
        """Choose a host of `req.region` and reserve `req` on it, in one transaction; with
        `computer_id`, the computer is put on it (its generation + 1) in the same one."""
        with self.db.engine.begin() as conn:
            _check_region(conn, computer_id, req.region)
            rows = conn.execute(
                select(*_LOAD).where(HostRow.region == req.region, HostRow.state == UP)
            ).all()
            hosts = [HostLoad(*r) for r in rows if r.id not in exclude]
            while hosts:
                candidates = choose(hosts, req, self.policy, self.rng)
                for chosen in candidates:
                    reserved = self._reserve(conn, chosen.host_id, req)
                    if reserved is not None:
                        epoch, reservation = reserved
                        generation = _put(conn, computer_id, chosen.host_id, req.region)
                        found = (chosen.host_id, chosen.name, epoch, req, chosen.score)
                        return Placement(*found, tuple(candidates), generation, reservation)
                # each filled up under us since it was read: sample among the others
                taken = {c.host_id for c in candidates}
                hosts = [h for h in hosts if h.id not in taken] if candidates else []
        hypervisors = " (and its hypervisor's)" if req.vms else ""
        raise InsufficientCapacityError(
            f"no host in region {req.region} has room for {req.vcpus} vCPU, "
            f"{req.memory_mib} MiB of RAM{hypervisors} and {req.disk_bytes} bytes of disk"
        )

    def place_on(self, host_id: str, req: Request, computer_id: str | None = None) -> Placement:
        """Reserve `req` on the host that holds the computer's data (start, resume, restore,
        fork, pool claims): that host or nothing."""
        with self.db.engine.begin() as conn:
            host = conn.execute(select(*_LOAD).where(HostRow.id == host_id)).one_or_none()
            if host is None:
                raise HostNotFoundError(f"no host {host_id}")
            if host.region != req.region:
                raise RegionMismatchError(
                    f"the data is on a host of region {host.region}, not {req.region}"
                )
            _check_region(conn, computer_id, req.region)
            if host.state != UP:
                raise UnavailableError(f"host {host.name} is {host.state}", "host_unavailable")
            load = HostLoad(*host)
            if req.vcpus > load.vcpus:
                raise InsufficientCapacityError(
                    f"{req.vcpus} vCPUs is more than host {host.name} has ({load.vcpus}): ask "
                    f"for at most {load.vcpus}"
                )
            reserved = self._reserve(conn, host_id, req)
            if reserved is None:
                raise InsufficientCapacityError(f"host {host.name} has no room for it now")
            epoch, reservation = reserved
            generation = _put(conn, computer_id, host_id, req.region)
            s = score(load, req, self.policy)
            only = (Candidate(host_id, host.name, s),)
            return Placement(host_id, host.name, epoch, req, s, only, generation, reservation)

    def release(self, placement: Placement) -> None:
        """Give back what a placement reserved (the work ended, or the host refused it); once."""
        reservations.release(self.db, placement.reservation)

    def _reserve(self, conn: Connection, host_id: str, req: Request) -> tuple[int, str] | None:
        """`req` added to the host's allocation if it is up and still fits (the row lock and
        this guard make concurrent reservations safe), and its record: the host's epoch and the
        record's id, or None. Its RAM is its guests' with the host's hypervisor overhead for
        each, as the row says it under the lock: the record keeps what was added, so a release
        takes off exactly that whatever the host reports meanwhile."""
        t = HostRow.__table__.c
        memory = req.memory_mib + req.vms * t.vm_overhead_mib
        found = conn.execute(
            update(HostRow)
            .where(t.id == host_id, t.state == UP, t.vcpus >= req.vcpus)
            .where(t.alloc_vcpus + req.vcpus <= t.vcpus * self.policy.vcpu_overcommit)
            .where(t.alloc_memory_mib + memory <= t.memory_mib)
            .where(
                t.alloc_disk_bytes + req.disk_bytes <= t.disk_bytes * self.policy.disk_overcommit
            )
            .values(
                alloc_vcpus=t.alloc_vcpus + req.vcpus,
                alloc_memory_mib=t.alloc_memory_mib + memory,
                alloc_disk_bytes=t.alloc_disk_bytes + req.disk_bytes,
            )
            .returning(t.epoch, t.vm_overhead_mib)
        ).one_or_none()
        if found is None:
            return None
        epoch, overhead = found
        share = reservations.Share(req.vcpus, req.memory_mib + req.vms * overhead, req.disk_bytes)
        return epoch, reservations.record(conn, host_id, share, self.node)

    def create(
        self, req: Request, attempt: Callable[[Placement], T], computer_id: str | None = None
    ) -> tuple[Placement, T]:
        """Place, then `attempt(placement)` (the call to the host); if it raises `HostRefused`
        the reservation is released and another host tried, `policy.tries` times in all."""
        refused: list[str] = []
        for _ in range(self.policy.tries):
            placement = self.place(req, computer_id, exclude=refused)
            try:
                return placement, attempt(placement)
            except HostRefused:
                refused.append(placement.host_id)
                self.release(placement)
            except BaseException:
                self.release(placement)
                raise
        raise InsufficientCapacityError(
            f"{len(refused)} hosts of region {req.region} refused it for capacity"
        )


def _check_region(conn: Connection, computer_id: str | None, region: str) -> None:
    """A computer's region never changes: refuse before anything is written."""
    if computer_id is None:
        return
    c = ComputerRow.__table__.c
    row = conn.execute(select(c.region).where(c.id == computer_id).with_for_update()).one_or_none()
    if row is None:
        raise NotFoundError(f"no computer {computer_id}", "computer_not_found")
    current = row.region
    if current is not None and current != region:
        raise RegionMismatchError(f"computer {computer_id} is in region {current}, not {region}")


def _put(conn: Connection, computer_id: str | None, host_id: str, region: str) -> int | None:
    if computer_id is None:
        return None
    c = ComputerRow.__table__.c
    return conn.execute(
        update(ComputerRow)
        .where(c.id == computer_id)
        .values(host_id=host_id, region=region, generation=c.generation + 1)
        .returning(c.generation)
    ).scalar()
