"""The fleet's tables (docs/fleet.md): hosts and their leases, operations on computers across API
nodes, one-time join tokens, the VMs template builds run on fleet hosts, and the API nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base, utcnow


class HostRow(Base):
    """A host of the fleet (docs/fleet.md): what it has (`vcpus`, `memory_mib`, `disk_bytes`) and
    what placements reserved of it (`alloc_*`), its lease on the database's clock, and its
    `epoch`, taken anew at every registration (a renewal names it: an old epoch is refused)."""

    __tablename__ = "hosts"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    region: Mapped[str] = mapped_column(String(32), index=True)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    hypervisor: Mapped[str] = mapped_column(String(32))
    accel: Mapped[str] = mapped_column(String(16))  # kvm | tcg
    address: Mapped[str] = mapped_column(String(255))
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(BigInteger)  # RAM it can admit guests into
    disk_bytes: Mapped[int] = mapped_column(BigInteger)
    # what it counts for a new VM's hypervisor beside its guest's RAM (placement reserves it too)
    vm_overhead_mib: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    alloc_vcpus: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    alloc_memory_mib: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    alloc_disk_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    layers: Mapped[list[str]] = mapped_column(JSON, default=list)  # template builds it holds
    epoch: Mapped[int] = mapped_column(BigInteger, default=1, server_default="1")
    state: Mapped[str] = mapped_column(String(16), index=True)  # up|suspect|lost|draining|retired
    lease_until: Mapped[datetime] = mapped_column()
    registered_at: Mapped[datetime] = mapped_column()
    # its certificate names it (joined from 0023 on): the control plane checks that name
    identity_bound: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # the last certificate signed for it (joined from 0025 on): the only one it may show
    cert_sha256: Mapped[str | None] = mapped_column(String(64), default=None)


class ReservationRow(Base):
    """What one placement reserved on a host (its share of the host's `alloc_*`), and the API
    node that holds it: released once, by its holder, or when that node starts again or has held
    it past any operation's length (it died and did not come back)."""

    __tablename__ = "reservations"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    host_id: Mapped[str] = mapped_column(String(32), index=True)
    node: Mapped[str | None] = mapped_column(String(64), default=None, index=True)
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(BigInteger)
    disk_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(index=True)


class OperationRow(Base):
    """An operation on a computer; at most one incomplete (`finished_at` None) per computer: the
    partial unique index is the guard across API nodes. Finished ones are swept once older than
    `SANBOX_OPERATION_RETENTION_DAYS` (`control/retention.py FinishedOperations`): nothing reads
    a finished operation for meaning."""

    __tablename__ = "operations"
    __table_args__ = (
        Index(
            "operations_one_incomplete",
            "computer_id",
            unique=True,
            postgresql_where=text("finished_at IS NULL"),
            sqlite_where=text("finished_at IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    op_id: Mapped[str] = mapped_column(String(32), unique=True)
    computer_id: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))  # running | done | failed | abandoned
    host_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    started_at: Mapped[datetime] = mapped_column(index=True)
    finished_at: Mapped[datetime | None] = mapped_column(default=None, index=True)
    node: Mapped[str | None] = mapped_column(String(64), default=None, index=True)  # its API node
    beat_at: Mapped[datetime | None] = mapped_column(default=None)  # its node's last sign of life


class JoinTokenRow(Base):
    """A one-time token for a host to join the fleet in `region` (docs/fleet.md): only its
    SHA-256 is kept; used once (`used_at`, by `host_name`), or never after `expires_at`. One
    made for a host has its `host_name` from the start: it admits that host only, and only such
    a token admits a host name already known. `certificate`: what its join was answered with
    (public), given again to that host asking again with the same key (`join.answered_again`)."""

    __tablename__ = "join_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    region: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column()
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column(default=None)
    host_name: Mapped[str | None] = mapped_column(String(63), default=None)
    certificate: Mapped[str | None] = mapped_column(Text, default=None)


class BuildVmRow(Base):
    """A VM a template build runs (`id`, its computer id on its host; `host_id` None: this
    server's own host), recorded before it is made, in the transaction that checks its org's quota
    for its vCPUs, memory and disk, and removed once it is destroyed: the org's quota counts it as
    a computer with compute, its usage interval (kind `build`) opens and closes with the record,
    the fleet's watches keep its egress and do not take it for a stranger, and the API `node` that
    runs the build ends what its previous life left."""

    __tablename__ = "build_vms"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    template: Mapped[str] = mapped_column(String(63))
    host_id: Mapped[str | None] = mapped_column(String(32), index=True, default=None)
    node: Mapped[str] = mapped_column(String(64), index=True)
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    disk_gib: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiNodeRow(Base):
    """An API node (`sanbox server` on a shared PostgreSQL; `name`: `operations.node_name`) and
    its last sign of life on the database's clock: the nodes that beat lately share every bound
    of an org that each enforces in its process (`fleet/api_nodes.py`)."""

    __tablename__ = "api_nodes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    started_at: Mapped[datetime] = mapped_column()
    beat_at: Mapped[datetime] = mapped_column(index=True)
