"""Shared by the benchmark scripts: the data dir, statistics, a throwaway computer."""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
from collections.abc import AsyncIterator
from pathlib import Path

from sanbox.host.data.layout import DataDir
from sanbox.host.image import Image, find_image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec


def data_dir() -> DataDir:
    root = os.environ.get("SANBOX_BENCH_DATA_DIR") or os.environ.get(
        "SANBOX_TEST_DATA_DIR", "/var/lib/sanbox-test"
    )
    return DataDir(Path(root))


def image(dd: DataDir) -> Image:
    return find_image(dd, "base")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(name: str, seconds: list[float], unit: str = "ms") -> str:
    scale = 1000.0 if unit == "ms" else 1.0
    med = statistics.median(seconds) * scale
    return (
        f"{name:<44} median {med:9.3f} {unit}   p90 {pct(seconds, 0.9) * scale:9.3f} {unit}"
        f"   (n={len(seconds)})"
    )


@contextlib.asynccontextmanager
async def computer(rt: HostRuntime, img: Image, **kw: object) -> AsyncIterator[Machine]:
    spec = MachineSpec(computer_id="bench" + secrets.token_hex(4), **kw)  # type: ignore[arg-type]
    machine, _disk = await rt.create(spec, img)
    try:
        yield machine
    finally:
        await machine.agent.close()
        await rt.destroy(spec.computer_id)


async def used_mib(m: Machine) -> int:
    """The guest's memory in use, as `free -m` counts it."""
    out = await m.agent.exec(["sh", "-c", "free -m | awk '/Mem:/ {print $3}'"])
    return int(out.stdout.decode().strip())
