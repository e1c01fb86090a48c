"""A snapshot: a computer's disk, and with its memory its processes, kept for the org."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import _known


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
