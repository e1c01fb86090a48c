"""The host: what it runs on, and its image builds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _known


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
