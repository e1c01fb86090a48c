"""What this host has, and whether a computer's resources fit in it.

Admission (`admit`, pure) refuses a create, start or resume before anything is made when the
guest's RAM would not fit in the shared-memory filesystem (`insufficient_memory`, 507) or its new
disk would not fit on the data filesystem (`insufficient_storage`, 507), counting what running
guests' RAM files and existing disks may still grow by (`host/space.py` measures that). Otherwise a
full filesystem surfaces later, inside a running guest, as a disk or memory error."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..host import space
from ..host.layout import DataDir, default_ram_dir
from ..host.space import Room
from .errors import InsufficientStorageError, InvalidRequestError

MIB = 1024 * 1024
GIB = 1024 * MIB


def _mib(n: int) -> str:
    return f"{max(0, n) // MIB} MiB"


def admit(memory_bytes: int, ram: Room, disk_bytes: int = 0, data: Room | None = None) -> None:
    """Refuse (InsufficientStorageError) unless the RAM and the new disk fit in what is spare."""
    if memory_bytes > ram.spare:
        raise InsufficientStorageError(
            f"{_mib(memory_bytes)} of guest memory does not fit in {ram.path}: {_mib(ram.free)} "
            f"free, {_mib(ram.promised)} of it promised to running computers' memory. Stop or "
            f"pause a computer, ask for less memory, or grow {ram.path}",
            "insufficient_memory",
        )
    if data is not None and disk_bytes > 0 and disk_bytes > data.spare:
        raise InsufficientStorageError(
            f"a {_mib(disk_bytes)} disk does not fit on the data filesystem ({data.path}): "
            f"{_mib(data.free)} free, {_mib(data.promised)} of it promised to existing disks "
            "as they fill. Delete computers or snapshots, ask for a smaller disk, or free space",
            "insufficient_storage",
        )


def host_memory_mib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


@dataclass(frozen=True)
class Capacity:
    cpus: int
    memory_mib: int

    @classmethod
    def of_host(cls) -> Capacity:
        return cls(cpus=os.cpu_count() or 1, memory_mib=host_memory_mib())

    def check(self, vcpus: int, memory_mib: int) -> None:
        if vcpus > self.cpus:
            raise InvalidRequestError(
                f"{vcpus} vCPUs is more than this host has ({self.cpus}): ask for at most "
                f"{self.cpus}",
                "insufficient_resources",
            )
        if memory_mib > self.memory_mib:
            raise InvalidRequestError(
                f"{memory_mib} MiB of memory is more than this host has ({self.memory_mib} MiB)",
                "insufficient_resources",
            )

    def admit_here(
        self,
        data_dir: DataDir,
        memory_mib: int,
        disk_gib: int = 0,
        computer_id: str | None = None,
        ram_dir: Path | None = None,
    ) -> None:
        """`admit` on this host's filesystems as they are now (`computer_id`'s own files are
        not counted against it)."""
        ram = space.ram_room(ram_dir or default_ram_dir(), computer_id, data_dir)
        data = space.disk_room(data_dir, computer_id) if disk_gib else None
        admit(memory_mib * MIB, ram, disk_gib * GIB, data)
