"""What the API says of a computer, its events, published ports and SSH access, and what its
commands and files give back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import _known


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
class SshAccess:
    """What adding an SSH key gave: the user it logs in as and the computer's host key line."""

    user: str
    host_key: str
    added: bool = True  # False when the key could log in already

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SshAccess:
        return cls(**_known(cls, data))


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
