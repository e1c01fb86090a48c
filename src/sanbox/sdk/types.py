"""The API's records as frozen dataclasses, each built from its JSON by `from_json` (and the
exec stream's events, which live with the exec codec in `exec_protocol`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .exec_protocol import ExecEvent, Exit, Stderr, Stdout

__all__ = [
    "ApiKey", "AuditRecord", "ComputerRecord", "Event", "ExecEvent", "ExecResult", "Exit",
    "FileEntry", "HostInfo", "ImageBuild", "Org", "PublishedPort", "Secret", "SecretBinding",
    "Snapshot", "SshAccess", "Stderr", "Stdout", "ViewLink",
]  # fmt: skip


@dataclass(frozen=True)
class ComputerRecord:
    id: str
    name: str
    state: str
    org: str = "default"
    template: str = "base"
    image: str | None = None  # the image build its disk was cloned from
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    hypervisor: str | None = None
    isolation: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    last_error: str | None = None
    idle_timeout: int | None = None
    memory: str | None = None  # what the last start or resume did: restored | lost
    memory_reason: str | None = None
    allow: list[str] = field(default_factory=list)  # the egress allowlist
    ports: list[dict[str, Any]] = field(default_factory=list)  # published guest ports
    origin: str | None = (
        None  # the snapshot (snp_) or computer (cmp_, a fork's source) it came from
    )
    lifetime: int = 0  # seconds from its creation, then stopped or deleted; 0: none
    on_lifetime: str = "stop"  # stop | delete
    max_running: int = 0  # seconds of running from its last start, then stopped; 0: none
    lifetime_ends_at: str | None = None
    running_ends_at: str | None = None  # while running, with a max_running
    unknown_reason: str | None = None  # with state `unknown`: why (its fleet host is not up)
    region: str | None = None  # the fleet region it runs in (None: the server's own host)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComputerRecord:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    signal: int | None = None  # the number of the signal that ended it
    timed_out: bool = False
    stdout_truncated: bool = False  # the output went past `max_output_bytes`: its first bytes
    stderr_truncated: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExecResult:
        return cls(**_known(cls, data))

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class FileEntry:
    name: str
    path: str
    type: str
    size: int = 0
    mode: int | str | None = None
    mtime: float | str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileEntry:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Event:
    id: int
    type: str
    computer_id: str | None = None
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    actor: str | None = None  # prefix of the key whose request caused it

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ImageBuild:
    template: str
    build_id: str
    kernel_release: str = ""
    current: bool = False  # what new computers of the template get
    computers: int = 0  # computers whose disk came from it (all orgs)
    bytes: int = 0  # on disk
    needed: bool = True  # kept by a prune

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageBuild:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Org:
    id: str
    name: str
    created_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Org:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class OrgRegions:
    """Where an org's computers run: `home` unless they ask (None: anywhere), or one of
    `allowed`."""

    org: str
    home: str | None = None
    allowed: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OrgRegions:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Quota:
    """An org's quota (`limits`: running, vcpus, memory_mib, disk_gib, snapshots; None is no
    limit) and what it uses now (`use`, the same keys)."""

    org: str
    limits: dict[str, int | None] = field(default_factory=dict)
    use: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Quota:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class ApiKey:
    id: str
    org: str
    name: str | None = None
    admin: bool = False  # manages its org's keys, reads its org's audit
    key: str | None = None  # the key itself: only in the answer to its creation
    created_at: str | None = None
    prefix: str | None = None  # its first characters, to tell keys apart
    host_admin: bool = False  # manages every org
    expires_at: str | None = None
    revoked_at: str | None = None
    last_used_at: str | None = None  # to the minute

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApiKey:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AuditRecord:
    """A request that meant to change something: who, what, on what, how it ended."""

    id: int
    action: str  # `POST /v1/computers/{ref}/stop`
    status: int  # HTTP status; 101: a WebSocket session
    time: str | None = None
    org: str | None = None  # the actor's org
    key_id: str | None = None
    key_prefix: str | None = None  # the actor; None: no known key
    target: dict[str, str] = field(default_factory=dict)  # the route's parameters
    code: str | None = None  # the error's code, if it failed
    client: str | None = None  # the client's address

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditRecord:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HostInfo:
    hypervisor: str
    isolation: str
    cpus: int
    memory_mib: int
    data_dir: str | None = None
    reflink: bool = False
    confinement: dict[str, Any] | None = None  # seccomp, user, cgroups, disk_errors

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostInfo:
        return cls(**_known(cls, data))


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Keep the fields this SDK knows, so a newer server's extra fields do not break it."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class SshAccess:
    """What adding an SSH key gave: the user it logs in as and the computer's host key line."""

    user: str
    host_key: str
    added: bool = True  # False when the key could log in already

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SshAccess:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class PublishedPort:
    port: int
    public: bool
    url: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PublishedPort:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class ViewLink:
    """A URL that opens one private port view-only for whoever holds it (no API key in it)."""

    url: str
    expires_at: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ViewLink:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Snapshot:
    """A computer's disk (and, with `memory`, its RAM and processes), kept for the org."""

    id: str
    computer_id: str  # the computer it was taken of (it may be gone)
    computer_name: str = ""
    name: str | None = None
    org: str | None = None
    template: str = "base"
    image: str | None = None
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int = 0
    memory: bool = False  # keeps memory and processes: computers made from it resume
    size_bytes: int = 0  # what it holds of its own (not its template's image)
    created_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Template:
    """A template: built in (`base`, everyone's), or built by the org from a spec."""

    name: str
    id: str | None = None  # tpl_...; None for a built-in template
    builtin: bool = False
    org: str | None = None
    state: str = "ready"  # building | ready | failed
    base: str | None = None
    image: str | None = None
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int = 0
    env: dict[str, str] = field(default_factory=dict)
    allow: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    idle_timeout: int = 0
    ready_snapshot: bool = False  # creates restore a ready computer (else they boot)
    ready_reason: str | None = None
    error: str | None = None  # why the last build failed
    steps: int = 0
    cached_steps: int = 0
    build_seconds: float = 0.0
    created_at: str | None = None
    updated_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Template:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BuildCachePruned:
    """What `client.templates.prune()` did: cached build steps deleted and kept, bytes freed."""

    removed_steps: int
    kept_steps: int
    freed_bytes: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildCachePruned:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Pool:
    """A warm pool: `size` computers of a template kept ready; a create of it claims one."""

    template: str
    size: int
    ready: int = 0  # running, ready to be claimed
    starting: int = 0  # being made
    refill: str = ""  # full, filling, shrinking, or "blocked: why"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pool:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Secret:
    """A stored credential: the hosts it is sent to and how. Its value is write-only: the API
    never returns it, so no record holds it."""

    id: str
    name: str
    hosts: list[str] = field(default_factory=list)  # api.openai.com, *.example.com
    header: str | None = None  # `Authorization: Bearer {value}`; None with placeholder_only
    placeholder_only: bool = False  # only replaces the placeholder, adds no header
    version: int = 1  # +1 at each rotation
    created_at: str | None = None
    updated_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Secret:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SecretBinding:
    """A secret bound to a computer: the computer sees only `placeholder` (in `env`, if set)."""

    secret: str  # the secret's name
    computer: str  # cmp_...
    placeholder: str  # sbx_ph_...: the proxy swaps it for the value on the secret's hosts
    env: str | None = None
    created_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SecretBinding:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
