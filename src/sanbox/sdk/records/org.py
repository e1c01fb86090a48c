"""Organisations, their quotas and regions, their API keys and audit records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import _known


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
