"""Request and response bodies of the API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..control.deadlines import MAX_LIMIT as DEADLINE_MAX
from ..control.deadlines import lifetime_ends, running_ends
from ..control.names import check_env, check_labels, check_name, check_public_key, check_text
from ..store.models import ComputerRow, SnapshotRow
from .ports.view_link import VIEW_LINK_MAX_TTL, VIEW_LINK_MIN_TTL, VIEW_LINK_TTL
from .secret_schemas import SecretRef

_NAME_DOC = "1-63 lowercase letters, digits and hyphens, starting and ending with a letter or digit"
Name = Annotated[str, AfterValidator(check_name), Field(description=_NAME_DOC)]
Text = Annotated[
    str,
    AfterValidator(lambda v: check_text(v, "name")),
    Field(description="at most 128 printable characters on one line"),
]
Labels = Annotated[dict[str, str], AfterValidator(check_labels)]
Env = Annotated[dict[str, str], AfterValidator(check_env)]


_LIFETIME = "seconds from its creation, then it is stopped or deleted (on_lifetime); 0: none"
_MAX_RUNNING = "seconds of running since its last start or resume, then it is stopped; 0: none"
Seconds = Annotated[int, Field(ge=0, le=DEADLINE_MAX)]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class ComputerCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    template: Name | None = Field(None, description="default: base, or the snapshot's")
    name: Name | None = None
    vcpus: int | None = Field(None, ge=1, le=256, description="default: 1, or the snapshot's")
    memory_mib: int | None = Field(
        None, ge=128, le=1024 * 1024, description="default: 512, or the snapshot's"
    )
    disk_gib: int | None = Field(
        None, ge=1, le=16 * 1024, description="default: the image's size, or the snapshot's"
    )
    from_snapshot: str | None = Field(
        None,
        max_length=63,
        description="a snapshot of the org (id or name): the new computer starts from its disk, "
        "and resumes from its memory if it has memory",
    )
    env: Env = Field(default_factory=dict)
    labels: Labels = Field(default_factory=dict)
    idle_timeout: int | None = Field(
        None,
        ge=0,
        le=365 * 86400,
        description="seconds without activity before it is suspended; 0 = never; "
        "default: the template's",
    )
    allow: list[str] | None = Field(
        None,
        max_length=1000,
        description="hosts (api.github.com), wildcards (*.pypi.org) and cidr:port rules it may "
        "reach; empty: nothing goes out; default: the template's",
    )
    lifetime: Seconds = Field(0, description=_LIFETIME)
    on_lifetime: Literal["stop", "delete"] = "stop"
    max_running: Seconds = Field(0, description=_MAX_RUNNING)
    region: str | None = Field(
        None,
        max_length=32,
        description="the region it runs in, one its org may use (a fleet's; never changes); "
        "default: the org's home region, or where what it starts from is",
    )
    secrets: list[SecretRef] = Field(
        default_factory=list,
        max_length=32,
        description="secrets of the org to bind (with the template's): the computer gets their "
        "placeholders, its requests to their hosts get their values",
    )


class ComputerUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    idle_timeout: int | None = Field(None, ge=0, le=365 * 86400)
    lifetime: Seconds | None = Field(None, description=_LIFETIME)
    on_lifetime: Literal["stop", "delete"] | None = None
    max_running: Seconds | None = Field(None, description=_MAX_RUNNING)


class Computer(BaseModel):
    id: str
    name: str
    org: str
    template: str
    image: str | None = Field(None, description="the image build its disk was cloned from")
    state: str
    vcpus: int
    memory_mib: int
    disk_gib: int
    env: dict[str, str]
    labels: dict[str, str]
    hypervisor: str
    isolation: str
    created_at: datetime
    updated_at: datetime
    last_error: str | None
    idle_timeout: int
    memory: Literal["restored", "lost"] | None = Field(
        None, description="what the last start or resume did with memory"
    )
    memory_reason: str | None = None
    allow: list[str] = Field(default_factory=list)
    ports: list[dict[str, Any]] = Field(default_factory=list)
    origin: str | None = Field(
        None, description="the snapshot (snp_) or computer (cmp_: a fork's source) it came from"
    )
    lifetime: int = Field(0, description=_LIFETIME)
    on_lifetime: str = "stop"
    max_running: int = Field(0, description=_MAX_RUNNING)
    lifetime_ends_at: datetime | None = Field(None, description="when its lifetime ends")
    running_ends_at: datetime | None = Field(
        None, description="while running: when its max running time ends"
    )
    unknown_reason: str | None = Field(
        None,
        description="with state `unknown`: why (its fleet host is suspect, lost or forgotten)",
    )
    region: str | None = Field(
        None, description="the fleet region it runs in (None: the server's own host)"
    )

    @classmethod
    def of(cls, row: ComputerRow, org_name: str, unknown: str | None = None) -> Computer:
        """`unknown`: why its state is not known now (it is then shown `unknown`)."""
        return cls(
            id=row.id,
            name=row.name,
            org=org_name,
            template=row.template,
            image=row.image,
            state="unknown" if unknown else row.state,
            unknown_reason=unknown,
            vcpus=row.vcpus,
            memory_mib=row.memory_mib,
            disk_gib=row.disk_gib,
            env=row.env,
            labels=row.labels,
            hypervisor=row.hypervisor,
            isolation=row.isolation,
            created_at=row.created_at,
            updated_at=row.updated_at,
            last_error=row.last_error,
            idle_timeout=row.idle_timeout,
            memory=row.memory,  # type: ignore[arg-type]
            memory_reason=row.memory_reason,
            allow=row.allow,
            ports=row.ports,
            origin=row.origin,
            lifetime=row.lifetime,
            on_lifetime=row.on_lifetime,
            max_running=row.max_running,
            lifetime_ends_at=lifetime_ends(row),
            running_ends_at=running_ends(row),
            region=row.region,
        )


class ComputerList(BaseModel):
    computers: list[Computer]


class FileEntry(BaseModel):
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    mode: int
    mtime: float


class FileList(BaseModel):
    entries: list[FileEntry]


class FileWritten(BaseModel):
    path: str
    size: int


class MkdirRequest(BaseModel):
    path: str


class Event(BaseModel):
    id: int
    computer_id: str | None
    type: str
    message: str
    data: dict[str, Any]
    created_at: str
    actor: str | None = Field(None, description="prefix of the key whose request caused it")


class EventList(BaseModel):
    events: list[Event]


class ConsoleTail(BaseModel):
    lines: list[str]


class ImageBuildOut(BaseModel):
    template: str
    build_id: str
    kernel_release: str
    current: bool = Field(description="the build new computers of this template get")
    computers: int = Field(description="computers whose disk came from this build (all orgs)")
    bytes: int = Field(description="space it takes on disk")
    needed: bool = Field(description="kept by a prune")


class ImageBuildList(BaseModel):
    images: list[ImageBuildOut]


class PruneResult(BaseModel):
    removed: list[ImageBuildOut]
    freed_bytes: int


class Confinement(BaseModel):
    """What confines each VM process on this host."""

    seccomp: str | None  # QEMU's -sandbox options; None: no seccomp filter
    user: str | None  # the unprivileged user VMs run as; None: the server's own user
    cgroups: dict[str, str]  # controller -> "cgroup v2", "cgroup v1" or "missing: why"
    disk_errors: str  # what a disk error does to a guest
    disk_io: str | None = None  # each VM's disk I/O bound and how it is held; None: not said


class HostInfo(BaseModel):
    hypervisor: str
    isolation: str
    cpus: int
    memory_mib: int
    data_dir: str
    reflink: bool
    confinement: Confinement


class NetworkPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allow: list[str] = Field(max_length=1000)


class NetworkOut(BaseModel):
    allow: list[str]
    closed_flows: int = 0  # open connections the change closed


class PortPublish(BaseModel):
    model_config = ConfigDict(extra="forbid")
    port: int = Field(ge=1, le=65535)
    public: bool = False


class PortOut(BaseModel):
    port: int
    public: bool
    url: str


class PortList(BaseModel):
    ports: list[PortOut]


class ViewLinkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expires_in: int = Field(
        default=VIEW_LINK_TTL,
        ge=VIEW_LINK_MIN_TTL,
        le=VIEW_LINK_MAX_TTL,
        description="seconds the link opens the port view-only",
    )


class ViewLinkOut(BaseModel):
    url: str = Field(description="the port's URL with a view token (no API key): view-only")
    expires_at: datetime


class SshKeyAdd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    public_key: Annotated[
        str,
        AfterValidator(check_public_key),
        Field(description="one OpenSSH public key line, `TYPE BASE64 [COMMENT]`, without options"),
    ]


class SshAccess(BaseModel):
    user: str = Field(description="the user the key logs in as")
    host_key: str = Field(description="the computer's SSH host key, for known_hosts")
    added: bool = Field(description="false when the key could log in already")


class SnapshotCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memory: bool = Field(
        False, description="keep memory, devices and processes too (a running or paused computer)"
    )
    name: Name | None = Field(None, description="a label, unique in the org")


class Snapshot(BaseModel):
    id: str
    name: str | None
    org: str
    computer_id: str = Field(description="the computer it was taken of (it may be gone)")
    computer_name: str
    template: str
    image: str | None
    vcpus: int
    memory_mib: int
    disk_gib: int
    memory: bool = Field(description="whether it keeps memory and processes")
    size_bytes: int = Field(description="what it holds of its own (not its template's image)")
    created_at: datetime

    @classmethod
    def of(cls, row: SnapshotRow, org_name: str) -> Snapshot:
        return cls(
            id=row.id,
            name=row.name,
            org=org_name,
            computer_id=row.computer_id,
            computer_name=row.computer_name,
            template=row.template,
            image=row.image,
            vcpus=row.vcpus,
            memory_mib=row.memory_mib,
            disk_gib=row.disk_gib,
            memory=row.memory,
            size_bytes=row.size_bytes,
            created_at=row.created_at,
        )


class SnapshotList(BaseModel):
    snapshots: list[Snapshot]


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = Field(1, ge=1, le=16)
    name: Name | None = Field(
        None,
        description="the fork's name (PREFIX-1..N for several); default: the source's "
        "name with a random suffix",
    )
    region: str | None = Field(
        None,
        max_length=32,
        description="a fork runs in its source's region: another is refused (region_mismatch)",
    )
