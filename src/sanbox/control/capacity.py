"""What this host has, and whether a computer's resources fit in it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import InvalidRequestError


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
