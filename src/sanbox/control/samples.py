"""CPU and memory of each running computer over the last hour, sampled from its VM process
(`/proc/PID/stat` CPU time, `/proc/PID/status` resident memory) every `INTERVAL` seconds and kept
in memory (`KEPT` samples a computer; computers no longer running are forgotten). What the
console draws its charts from; nothing is stored, so a restart starts the hour again."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from dataclasses import dataclass

from .fleet import Fleet

log = logging.getLogger(__name__)

INTERVAL = 30.0
KEPT = int(3600 / INTERVAL)
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    at: float  # wall-clock seconds
    cpu: float  # share of its vCPUs used since the previous sample, 0..1
    memory_mib: float  # resident memory of its VM process


def read_process(pid: int) -> tuple[float, float] | None:
    """CPU seconds used and resident MiB of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            rss = next((line.split()[1] for line in f if line.startswith("VmRSS:")), "0")
    except (OSError, IndexError, ValueError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS, int(rss) / 1024


class Samples:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._series: dict[str, deque[Sample]] = {}
        self._last: dict[str, tuple[float, float]] = {}  # computer -> (monotonic, cpu seconds)

    def of(self, computer_id: str) -> list[Sample]:
        return list(self._series.get(computer_id, ()))

    def sample(self) -> None:
        running = set(self.fleet.machines)
        for gone in set(self._series) - running:
            self._series.pop(gone, None)
            self._last.pop(gone, None)
        now, wall = time.monotonic(), time.time()
        for computer_id in running:
            row = self.fleet.by_id(computer_id)
            pid = self._pid(computer_id)
            found = read_process(pid) if pid is not None else None
            if row is None or found is None:
                continue
            cpu_seconds, rss = found
            before = self._last.get(computer_id)
            self._last[computer_id] = (now, cpu_seconds)
            if before is None or now <= before[0]:
                continue
            share = (cpu_seconds - before[1]) / (now - before[0]) / max(row.vcpus, 1)
            series = self._series.setdefault(computer_id, deque(maxlen=KEPT))
            series.append(Sample(wall, min(max(share, 0.0), 1.0), rss))

    def _pid(self, computer_id: str) -> int | None:
        run = self.fleet.runtime.data_dir.computer(computer_id).run
        try:
            return int((run / "vm.pid").read_text())
        except (OSError, ValueError):
            return None

    async def watch(self, interval: float = INTERVAL) -> None:
        while True:
            try:
                self.sample()  # a few small /proc reads a computer: no thread needed
            except Exception:
                log.exception("sampling the computers' CPU and memory failed")
            await asyncio.sleep(interval)
