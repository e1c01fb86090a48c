"""Templates, their build cache and their warm pools."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import _known


@dataclass(frozen=True)
class Template:
    """A template: built in (`base`, everyone's), or built by the org from a spec."""

    name: str
    id: str | None = None  # tpl_...; None for a built-in template
    builtin: bool = False
    org: str | None = None
    region: str | None = None  # the fleet region this build of it is in (None: the server's host)
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
    ready: int = 0  # what a create could claim now
    starting: int = 0  # being made or warmed
    unavailable: int = 0  # kept but not claimable now: on a host away or draining, out of region
    refill: str = ""  # full, filling, shrinking, or "blocked: why"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pool:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
