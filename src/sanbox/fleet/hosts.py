"""Hosts: registration (a new epoch each time, in one statement), lease renewal on the
database's clock, the sweep that declares silent hosts `suspect` then `lost`, drain and forget,
and the fence on a host's reports (its epoch and the computer's generation).

Lease: a renewal sets `lease_until = now() + ttl` only `WHERE id AND epoch` match and the host
is not lost; zero rows is `HostLostError`, and the host must register again (a new epoch). A host
whose lease ended is `suspect` (nothing new is placed on it); `lost_after` seconds after its last
renewal it is `lost`. Every transition is one UPDATE, so of many sweepers exactly one sees each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy import Connection, case, delete, exists, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..store import Database
from ..store.fleet_models import HostRow, ReservationRow
from ..store.models import ComputerRow
from ..store.repo import new_id
from . import clock
from .errors import (
    HostLostError,
    HostNotFoundError,
    HostStateError,
    RegionMismatchError,
    StaleGenerationError,
)

UP, SUSPECT, LOST, DRAINING, RETIRED = "up", "suspect", "lost", "draining", "retired"
GONE = (LOST, RETIRED)  # states a renewal or a report is refused in
MAX_LABELS, MAX_LAYERS = 64, 10_000
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_PLACED = {"host_id", "region", "generation"}  # only a placement writes these


@dataclass(frozen=True)
class Capacity:
    vcpus: int
    memory_mib: int  # RAM guests can be admitted into (with their hypervisors)
    disk_bytes: int
    vm_overhead_mib: int = 0  # what it counts for a new VM's hypervisor beside its guest's RAM


@dataclass(frozen=True)
class HostSpec:
    """What a host says of itself when it registers."""

    name: str
    region: str
    address: str
    capacity: Capacity
    hypervisor: str  # its driver's name
    accel: str = "kvm"
    labels: dict[str, str] = field(default_factory=dict)
    layers: Sequence[str] = ()  # template builds and layers it holds

    def __post_init__(self) -> None:
        for what, value, most in (("name", self.name, 63), ("region", self.region, 32)):
            if not (_NAME.fullmatch(value) and len(value) <= most):
                raise ValueError(f"a host's {what} is 1-{most} of a-z, 0-9, '-': {value[:70]!r}")
        if len(self.labels) > MAX_LABELS or len(self.layers) > MAX_LAYERS:
            raise ValueError(f"at most {MAX_LABELS} labels and {MAX_LAYERS} layers")
        if any(len(k) > 63 or len(v) > 63 for k, v in self.labels.items()):
            raise ValueError("a label's key and value are at most 63 characters")
        c = self.capacity
        if min(c.vcpus, c.memory_mib, c.disk_bytes, c.vm_overhead_mib) < 0:
            raise ValueError("a capacity is not negative")


@dataclass(frozen=True)
class Lease:
    host_id: str
    epoch: int
    until: datetime


@dataclass(frozen=True)
class LeasePolicy:
    """`ttl`: a renewal's length (no renewal for that long: suspect); `lost_after`: seconds
    since the last renewal after which the host is lost (more than `ttl`)."""

    ttl: float = 15.0
    lost_after: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.ttl < self.lost_after:
            raise ValueError("a lease policy needs 0 < ttl < lost_after")


@dataclass(frozen=True)
class Swept:
    suspect: list[str]  # host names newly suspect
    lost: list[str]  # host names newly lost
    unknown: list[str]  # ids of the computers on the hosts newly lost


class Hosts:
    def __init__(self, db: Database, policy: LeasePolicy | None = None) -> None:
        self.db = db
        self.policy = policy or LeasePolicy()

    def register(self, spec: HostSpec) -> Lease:
        """Register `spec.name`, or register it again: either way with a new epoch, in one
        statement. A host keeps its region (a different one is `region_mismatch`); a draining
        host stays draining."""
        with self.db.engine.begin() as conn:
            d = conn.dialect
            values: dict[str, Any] = {
                "name": spec.name,
                "region": spec.region,
                "address": spec.address,
                "labels": dict(spec.labels),
                "hypervisor": spec.hypervisor,
                "accel": spec.accel,
                "vcpus": spec.capacity.vcpus,
                "memory_mib": spec.capacity.memory_mib,
                "disk_bytes": spec.capacity.disk_bytes,
                "vm_overhead_mib": spec.capacity.vm_overhead_mib,
                "layers": list(spec.layers),
            }
            dialect_insert = postgresql.insert if d.name == "postgresql" else sqlite.insert
            ins = dialect_insert(HostRow).values(
                id=new_id("hst_"),
                epoch=1,
                state=UP,
                lease_until=clock.at(d, self.policy.ttl),
                registered_at=clock.now(d),
                **values,
            )
            t = HostRow.__table__.c
            again = {k: getattr(ins.excluded, k) for k in values if k not in ("name", "region")}
            stmt = ins.on_conflict_do_update(
                index_elements=["name"],
                set_={
                    **again,
                    "epoch": t.epoch + 1,
                    "state": case((t.state == DRAINING, DRAINING), else_=UP),
                    "lease_until": ins.excluded.lease_until,
                    "registered_at": ins.excluded.registered_at,
                },
                where=t.region == ins.excluded.region,
            ).returning(t.id, t.epoch, t.lease_until)
            row = conn.execute(stmt).one_or_none()
            if row is None:
                region = conn.execute(select(t.region).where(t.name == spec.name)).scalar()
                raise RegionMismatchError(
                    f"host {spec.name} is in region {region}; it cannot register in {spec.region}"
                )
            return Lease(row.id, row.epoch, row.lease_until)

    def renew(
        self, lease: Lease, capacity: Capacity | None = None, layers: Sequence[str] | None = None
    ) -> Lease:
        """Extend the lease on the database's clock (a suspect host is up again), with what the
        host reports of its capacity and layers now. Zero rows: this epoch is no longer the
        host's (`HostLostError`): register again."""
        t = HostRow.__table__.c
        with self.db.engine.begin() as conn:
            values: dict[str, Any] = {
                "lease_until": clock.at(conn.dialect, self.policy.ttl),
                "state": case((t.state == SUSPECT, UP), else_=t.state),
            }
            if capacity is not None:
                values |= {
                    "vcpus": capacity.vcpus,
                    "memory_mib": capacity.memory_mib,
                    "disk_bytes": capacity.disk_bytes,
                    "vm_overhead_mib": capacity.vm_overhead_mib,
                }
            if layers is not None:
                values["layers"] = list(layers[:MAX_LAYERS])
            until = conn.execute(
                update(HostRow)
                .where(t.id == lease.host_id, t.epoch == lease.epoch, t.state.not_in(GONE))
                .values(values)
                .returning(t.lease_until)
            ).scalar()
        if until is None:
            raise HostLostError(
                f"host {lease.host_id} epoch {lease.epoch} no longer holds a lease: register again"
            )
        return Lease(lease.host_id, lease.epoch, until)

    def sweep(self) -> Swept:
        """Declare the hosts whose lease ended `suspect`, and those silent for `lost_after`
        `lost`; return them, and the computers on the newly lost (to be shown `unknown`)."""
        t = HostRow.__table__.c
        with self.db.engine.begin() as conn:
            d = conn.dialect
            lost_before = clock.at(d, self.policy.ttl - self.policy.lost_after)
            lost = conn.execute(
                update(HostRow)
                .where(t.state.in_((UP, SUSPECT, DRAINING)), t.lease_until < lost_before)
                .values(state=LOST)
                .returning(t.id, t.name)
            ).all()
            suspect = conn.execute(
                update(HostRow)
                .where(t.state == UP, t.lease_until < clock.now(d))
                .values(state=SUSPECT)
                .returning(t.name)
            ).scalars()
            suspect_names = sorted(suspect)
            unknown = _computers_on(conn, [r.id for r in lost])
        return Swept(suspect_names, sorted(r.name for r in lost), unknown)

    def drain(self, name: str, draining: bool = True) -> None:
        """Place nothing new on it (or, `draining=False`, again); its computers stay."""
        t = HostRow.__table__.c
        was, to = ((UP, SUSPECT), DRAINING) if draining else ((DRAINING,), UP)
        with self.db.engine.begin() as conn:
            done = conn.execute(
                update(HostRow).where(t.name == name, t.state.in_(was)).values(state=to)
            ).rowcount
            if not done:
                what = "drained (only an up or suspect host)" if draining else "undrained"
                self._raise_state(conn, name, f"cannot be {what}", "invalid_host_state")

    def forget(self, name: str) -> list[str]:
        """An operator's word that a lost host is dead: it is retired, its reservations dropped;
        return its computers' ids (they can be deleted, or made anew elsewhere)."""
        t = HostRow.__table__.c
        with self.db.engine.begin() as conn:
            host_id = conn.execute(
                update(HostRow)
                .where(t.name == name, t.state == LOST)
                .values(state=RETIRED, alloc_vcpus=0, alloc_memory_mib=0, alloc_disk_bytes=0)
                .returning(t.id)
            ).scalar()
            if host_id is None:
                self._raise_state(conn, name, "is not lost: only a lost host can be forgotten")
            conn.execute(delete(ReservationRow).where(ReservationRow.host_id == host_id))
            return _computers_on(conn, [host_id])

    def all(self) -> list[HostRow]:
        """Every host, by name."""
        with self.db.session() as s:
            return list(s.scalars(select(HostRow).order_by(HostRow.name)))

    def get(self, name: str) -> HostRow:
        with self.db.session() as s:
            row = s.scalars(select(HostRow).where(HostRow.name == name)).one_or_none()
        if row is None:
            raise HostNotFoundError(f"no host named {name}")
        return row

    def report(self, lease: Lease, computer_id: str, generation: int, **values: Any) -> None:
        """Write a host's report on a computer (`values`: columns of `computers`) only if the
        host still holds it: this host, this epoch (not lost), this generation. In one
        statement; zero rows is `StaleGenerationError` (the host must stop that VM)."""
        if _PLACED & values.keys():
            raise ValueError(f"a host's report does not set {sorted(_PLACED & values.keys())}")
        c, h = ComputerRow.__table__.c, HostRow.__table__.c
        holds = exists().where(h.id == lease.host_id, h.epoch == lease.epoch, h.state.not_in(GONE))
        with self.db.engine.begin() as conn:
            done = conn.execute(
                update(ComputerRow)
                .where(c.id == computer_id, c.host_id == lease.host_id)
                .where(c.generation == generation, holds)
                .values(values)
            ).rowcount
        if not done:
            raise StaleGenerationError(
                f"computer {computer_id} generation {generation} is not held by host "
                f"{lease.host_id} epoch {lease.epoch}"
            )

    @staticmethod
    def _raise_state(conn: Connection, name: str, why: str, code: str | None = None) -> NoReturn:
        state = conn.execute(select(HostRow.state).where(HostRow.name == name)).scalar()
        if state is None:
            raise HostNotFoundError(f"no host named {name}")
        raise HostStateError(f"host {name} ({state}) {why}", code)


def _computers_on(conn: Connection, host_ids: list[str]) -> list[str]:
    if not host_ids:
        return []
    c = ComputerRow.__table__.c
    return sorted(conn.execute(select(c.id).where(c.host_id.in_(host_ids))).scalars())
