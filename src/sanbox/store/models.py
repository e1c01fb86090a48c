"""The tables. Computers are deleted outright; their events stay, keyed by the computer's id.
Keys are never deleted either: a revoked key keeps its row (and its audit records their meaning)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps in UTC, aware on the way out (SQLite drops the zone, PostgreSQL keeps it), and
    in UTC on the way in: SQLite would compare another zone's wall-clock time as if it were
    UTC's (a usage period asked for as `+02:00`)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            return value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: UtcDateTime()}


class Org(Base):
    __tablename__ = "orgs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    home_region: Mapped[str | None] = mapped_column(String(32), default=None)  # None: any host
    regions: Mapped[list[str] | None] = mapped_column(JSON, default=None)  # others it may use


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    name: Mapped[str] = mapped_column(String(100), default="")
    prefix: Mapped[str] = mapped_column(String(16))  # shown to tell keys apart; not a secret
    hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the key
    admin: Mapped[bool] = mapped_column(Boolean, default=False)  # manages its org's keys
    host_admin: Mapped[bool] = mapped_column(Boolean, default=False)  # every org, the host
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)  # to the minute


class QuotaRow(Base):
    """What an org may use at once, set by a host admin; None (or no row) is no limit."""

    __tablename__ = "quotas"
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), primary_key=True)
    running: Mapped[int | None] = mapped_column(Integer, default=None)  # computers with compute
    vcpus: Mapped[int | None] = mapped_column(Integer, default=None)  # of those
    memory_mib: Mapped[int | None] = mapped_column(Integer, default=None)  # of those
    disk_gib: Mapped[int | None] = mapped_column(Integer, default=None)  # every computer's disk
    snapshots: Mapped[int | None] = mapped_column(Integer, default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ComputerRow(Base):
    __tablename__ = "computers"
    __table_args__ = (
        UniqueConstraint("org_id", "name"),
        UniqueConstraint("org_id", "idempotency_key"),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    template: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16), index=True)
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_gib: Mapped[int] = mapped_column(Integer)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # E2B's metadata as its SDK gave them (names.check_metadata); None: made before they were
    # kept apart from the labels, or not through E2B's API
    e2b_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    hypervisor: Mapped[str] = mapped_column(String(32), default="unknown")  # the driver's name
    isolation: Mapped[str] = mapped_column(String(32), default="")
    image: Mapped[str | None] = mapped_column(String(64), default=None)  # its disk's image build
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    idle_timeout: Mapped[int] = mapped_column(Integer, default=0)  # seconds; 0 = never
    memory: Mapped[str | None] = mapped_column(String(16), default=None)  # restored | lost
    memory_reason: Mapped[str | None] = mapped_column(Text, default=None)
    last_active_at: Mapped[datetime | None] = mapped_column(default=None)  # for the idle watcher
    allow: Mapped[list[str]] = mapped_column(JSON, default=list)  # egress allowlist
    ports: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # published ports
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    request_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    origin: Mapped[str | None] = mapped_column(String(32), default=None)  # snp_/cmp_ it came from
    pool: Mapped[str | None] = mapped_column(String(32), default=None, index=True)  # unclaimed
    # a copy not yet given its own identity: `copy` (from a snapshot or template), `fork`, `claim`
    identity_pending: Mapped[str | None] = mapped_column(String(16), default=None)
    # session limits (seconds; 0 = none): a deadline `lifetime` after created_at (then stopped
    # or deleted, `on_lifetime`), and `max_running` after started_at (the last start or resume)
    lifetime: Mapped[int] = mapped_column(Integer, default=0)
    on_lifetime: Mapped[str] = mapped_column(String(8), default="stop")
    # seconds: the lifetime from each wake after a lifetime that suspends it ended (E2B's
    # auto-resume: its create's timeout); None: as long as its last run had (deadlines.py)
    wake_lifetime: Mapped[int | None] = mapped_column(Integer, default=None)
    # E2B's pause put it to rest, ending its lifetime (if any): no deadline acts while it rests,
    # and it comes up with a fresh one (deadlines.py); set as that pause begins, cleared when it
    # runs again or is given a lifetime
    # (the database's default alone, as every column after 0025's: a record written the model's
    # way into an older schema names none of them)
    pause_ended_lifetime: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # the Idempotency-Key of its last move (control/moving.py): a retry answers, not moves
    move_key: Mapped[str | None] = mapped_column(String(200), default=None)
    # the rest with memory a pause under way ends in, or a resume under way came from (`paused`,
    # `suspended`): what a restart that interrupts either ends it as (control/interrupted.py)
    rest_state: Mapped[str | None] = mapped_column(String(16), default=None)
    max_running: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    # when it last came to rest (paused, suspended or stopped; `Fleet.record`): E2B's `endAt` of
    # a paused sandbox. None: not since it was kept (migration 0034)
    rested_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    # the fleet (docs/fleet.md): the host that holds it, its region (never changes) and its
    # placement generation (every placement adds one; a host's reports count only for it)
    host_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    region: Mapped[str | None] = mapped_column(String(32), default=None)
    generation: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class SnapshotRow(Base):
    """A computer's disk at one moment, with its memory when taken with it. It belongs to the org
    and outlives the computer it came from; what a new computer from it gets (template, build,
    size, allowlist, env) is copied here. Listed only once `ready`: the host's files are complete,
    durable and verified by then."""

    __tablename__ = "snapshots"
    __table_args__ = (UniqueConstraint("org_id", "name"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    name: Mapped[str | None] = mapped_column(String(63), default=None)  # the user's label
    state: Mapped[str] = mapped_column(String(16), index=True)  # creating | ready
    computer_id: Mapped[str] = mapped_column(String(32), index=True)  # where it came from
    computer_name: Mapped[str] = mapped_column(String(63))
    template: Mapped[str] = mapped_column(String(63))
    image: Mapped[str | None] = mapped_column(String(64), default=None)
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_gib: Mapped[int] = mapped_column(Integer)
    memory: Mapped[bool] = mapped_column(Boolean, default=False)  # RAM, devices, processes too
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # what it holds of its own
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    allow: Mapped[list[str]] = mapped_column(JSON, default=list)
    idle_timeout: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # the fleet host that holds its files (None: the server's own host, as its computers')
    host_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    # the Idempotency-Key of its last move (control/moving.py): a retry answers, not moves
    move_key: Mapped[str | None] = mapped_column(String(200), default=None)


class TemplateRow(Base):
    """A template an org built from a spec, in one region: its disk is a chain of build-step
    snapshots (`snapshot_id`, the last), and `ready_snapshot_id` keeps one of its computers booted
    and ready (memory too), which creates restore. What its computers get is copied here from the
    spec. The same name built in another region is another row."""

    __tablename__ = "templates"
    __table_args__ = (UniqueConstraint("org_id", "name", "region", name="uq_templates_region"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    # built per region (docs/fleet.md): its layers and ready snapshot are on a host of it; ""
    # is the server's own host, which has no region
    region: Mapped[str] = mapped_column(String(32), default="", server_default="")
    state: Mapped[str] = mapped_column(String(16), index=True)  # building | ready | failed
    base: Mapped[str] = mapped_column(String(63))
    image: Mapped[str | None] = mapped_column(String(64), default=None)  # the root image build
    spec: Mapped[str] = mapped_column(Text)  # the spec file as written
    digest: Mapped[str] = mapped_column(String(64))  # of the spec, its files and its base
    snapshot_id: Mapped[str | None] = mapped_column(String(32), default=None)  # the built disk
    ready_snapshot_id: Mapped[str | None] = mapped_column(String(32), default=None)
    ready_reason: Mapped[str | None] = mapped_column(Text, default=None)  # why none, if none
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_gib: Mapped[int] = mapped_column(Integer, default=0)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    allow: Mapped[list[str]] = mapped_column(JSON, default=list)
    ports: Mapped[list[int]] = mapped_column(JSON, default=list)
    secrets: Mapped[dict[str, Any]] = mapped_column(default=dict)  # name -> env var ("": none)
    idle_timeout: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    cached_steps: Mapped[int] = mapped_column(Integer, default=0)
    build_seconds: Mapped[float] = mapped_column(default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class BuildStepRow(Base):
    """A built step, by the content key of it and everything before it (the org, the base's
    build, the steps and the files they copy): a later build with the same prefix starts from
    its snapshot instead of running it again."""

    __tablename__ = "build_steps"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    snapshot_id: Mapped[str] = mapped_column(String(32), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PoolRow(Base):
    """A warm pool: `size` computers of an org's template kept running, ready and unclaimed
    (their `computers.pool` is this pool's id until a create claims one)."""

    __tablename__ = "pools"
    __table_args__ = (UniqueConstraint("org_id", "template"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    template: Mapped[str] = mapped_column(String(63))
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class SecretRow(Base):
    """A credential the egress proxy adds to requests for `hosts`: sealed at rest (`sealed`, under
    the server's sealing key file), never returned. `header` is `Name: template` with `{value}`;
    None with `placeholder_only` means only placeholders are replaced."""

    __tablename__ = "secrets"
    __table_args__ = (UniqueConstraint("org_id", "name"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    hosts: Mapped[list[str]] = mapped_column(JSON, default=list)
    header: Mapped[str | None] = mapped_column(String(200), default=None)
    placeholder_only: Mapped[bool] = mapped_column(Boolean, default=False)
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class SecretBindingRow(Base):
    """A secret bound to a computer: the computer's processes get `placeholder` in `env`."""

    __tablename__ = "secret_bindings"
    __table_args__ = (UniqueConstraint("secret_id", "computer_id"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret_id: Mapped[str] = mapped_column(ForeignKey("secrets.id"), index=True)
    computer_id: Mapped[str] = mapped_column(String(32), index=True)
    env: Mapped[str | None] = mapped_column(String(128), default=None)
    placeholder: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OrgCaRow(Base):
    """An org's egress CA: its certificate, and its key sealed (never in a guest)."""

    __tablename__ = "org_cas"
    org_id: Mapped[str] = mapped_column(ForeignKey("orgs.id"), primary_key=True)
    cert_pem: Mapped[str] = mapped_column(Text)
    key_sealed: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    org_id: Mapped[str] = mapped_column(String(32), index=True)
    computer_id: Mapped[str | None] = mapped_column(String(32), index=True)
    type: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    actor: Mapped[str | None] = mapped_column(String(16), default=None)  # key prefix of a request
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditRow(Base):
    """One request that meant to change something (anything but GET/HEAD/OPTIONS under /v1), and
    what came of it. Never a body, a query string or a key: who, what, on what, how it ended."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)  # when the request came in
    org_id: Mapped[str | None] = mapped_column(String(32), index=True)  # the actor's org
    key_id: Mapped[str | None] = mapped_column(String(32), index=True)  # None: no known key
    key_prefix: Mapped[str | None] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(200))  # `POST /v1/computers/{ref}/stop`
    target: Mapped[dict[str, Any]] = mapped_column(default=dict)  # the path's parameters
    status: Mapped[int] = mapped_column(Integer)  # HTTP status (101: a WebSocket session)
    code: Mapped[str | None] = mapped_column(String(64))  # the error's code, if any
    client: Mapped[str | None] = mapped_column(String(64))  # the client's address


class UsageRow(Base):
    """One usage interval: a computer in one state with one allocation (or, `kind` snapshot,
    a snapshot or template layer holding `size_bytes`), from `started_at` to
    `ended_at` (None while open; `checked_at` is the last moment it was seen to hold). Closed at
    every transition and every minute while running; `seq` is given at close, in commit order,
    and is the cursor billing consumers read after. `cpu_seconds` is measured (None: unmeasured);
    `cpu_mark_usec` and `egress_mark` are the counters last read into it."""

    __tablename__ = "usage_intervals"
    __table_args__ = (  # one open interval a computer or snapshot: the guard across API nodes
        Index(
            "usage_intervals_one_open",
            "computer_id",
            unique=True,
            postgresql_where=text("ended_at IS NULL"),
            sqlite_where=text("ended_at IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    kind: Mapped[str] = mapped_column(String(16), default="computer")
    org_id: Mapped[str] = mapped_column(String(32), index=True)
    computer_id: Mapped[str] = mapped_column(String(32), index=True)
    ordinal: Mapped[int] = mapped_column(Integer)  # its n-th interval, from 1
    name: Mapped[str] = mapped_column(String(63))
    template: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16))
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_gib: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(index=True)
    ended_at: Mapped[datetime | None] = mapped_column(default=None, index=True)
    checked_at: Mapped[datetime] = mapped_column()
    cpu_seconds: Mapped[float | None] = mapped_column(default=None)
    cpu_mark_usec: Mapped[int | None] = mapped_column(BigInteger, default=None)
    egress_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    egress_mark: Mapped[int | None] = mapped_column(BigInteger, default=None)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # a snapshot's own bytes
    seq: Mapped[int | None] = mapped_column(BigInteger, default=None, unique=True)


class UsageSequenceRow(Base):
    """The one counter closed intervals take their `seq` from (its row lock orders them)."""

    __tablename__ = "usage_sequence"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class ConsoleSessionRow(Base):
    """A web console session (console/sessions.py): only the sha256 of its cookie token is kept,
    with the key it was made from, its CSRF token and its times (seconds since the epoch). In
    the database, so every API node knows every session."""

    __tablename__ = "console_sessions"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(32), index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    created: Mapped[float] = mapped_column()
    seen: Mapped[float] = mapped_column(index=True)


class LoginLinkRow(Base):
    """A one-time console login link (`sanbox console`): the sha256 of its token, its key, and
    when it stops working (seconds since the epoch)."""

    __tablename__ = "login_links"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(32))
    ends: Mapped[float] = mapped_column(index=True)
