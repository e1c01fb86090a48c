"""Density: how many idle 512 MiB computers this host admits, and what each costs the host
running and paused, in one run.

Admission is the control plane's own (`capacity.admit` on this host's RAM dir and data
filesystem, as they are after each start, thin disks counted at their full size unless
SANBOX_DISK_OVERCOMMIT says otherwise): the run starts computers until it refuses, or until MAX
(this machine has two cores, and every guest runs under TCG: MAX keeps the run short; the count
admission would allow is printed either way, from the room left). With overcommit the server's
low watermark (10% of the data filesystem kept free) is kept as well. For each running computer,
idle after its boot settles: its QEMU's proportional set size (its RAM file's pages, the TCG code
cache, QEMU itself), its RAM file's allocated bytes, and its CPU over a quiet window; then each is
paused with memory and the same taken again (no process: its saved state's bytes on disk).
Usage: python benchmarks/density.py [MAX [MEMORY_MIB]]   (default 6 computers of 512 MiB)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import statistics
import sys
import time

from _common import data_dir, image, pct

from sanbox.control.capacity import DISK_LOW_WATERMARK, admit, low_watermark
from sanbox.control.errors import ControlError
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec

MIB = 1024**2
QUIET = 20.0  # seconds over which an idle computer's CPU is measured
SETTLE = 10.0  # seconds a booted guest is left to finish its start-up before it counts as idle


def pss_bytes(pid: int) -> int:
    """A process's proportional set size: what it costs the host's memory."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def allocated(path: str) -> int:
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def stats(values: list[float], unit: str, scale: float = 1.0) -> str:
    return (
        f"median {statistics.median(values) / scale:8.1f} {unit}   "
        f"p90 {pct(values, 0.9) / scale:8.1f} {unit}   total {sum(values) / scale:9.1f} {unit}"
    )


def reserve_of(rt: HostRuntime, overcommit: float) -> int:
    """The low watermark an overcommitting host keeps free (the server's default)."""
    return low_watermark(rt.data_dir.root, DISK_LOW_WATERMARK) if overcommit > 1 else 0


def admitted(rt: HostRuntime, spec: MachineSpec, disk_bytes: int, overcommit: float) -> bool:
    ram, data = rt.room()
    try:
        admit(spec.memory_mib * MIB, ram, disk_bytes, data, overcommit, reserve_of(rt, overcommit))
    except ControlError:
        return False
    return True


def room_for(rt: HostRuntime, memory_mib: int, disk_bytes: int, overcommit: float) -> int:
    """How many more such computers admission would take, from the room left now."""
    ram, data = rt.room()
    by_ram = max(0, ram.spare) // (memory_mib * MIB)
    if data is None or disk_bytes <= 0:
        return by_ram
    spendable = (data.free - reserve_of(rt, overcommit)) * overcommit - data.promised
    return min(by_ram, max(0, int(spendable)) // disk_bytes)


async def cpu_of(pids: list[int]) -> list[float]:
    """Each process's CPU share (1.0: a whole core) over QUIET seconds."""
    before = [cpu_seconds(p) for p in pids]
    t = time.monotonic()
    await asyncio.sleep(QUIET)
    took = time.monotonic() - t
    return [(cpu_seconds(p) - b) / took for p, b in zip(pids, before, strict=True)]


async def main(limit: int, memory_mib: int) -> None:
    started = time.perf_counter()
    overcommit = float(os.environ.get("SANBOX_DISK_OVERCOMMIT") or 1.0)
    rt = HostRuntime(data_dir())
    img = image(rt.data_dir)
    disk_bytes = img.disk_size_gib * 1024**3
    print(
        f"{(await rt.hypervisor(img)).isolation}, image {img.build_id}, {memory_mib} MiB guests, "
        f"{img.disk_size_gib} GiB disks, disk overcommit {overcommit:g}"
    )
    print(
        f"admission would take {room_for(rt, memory_mib, disk_bytes, overcommit)} such "
        "computers on this host as it is now"
    )
    running: list[tuple[Machine, MachineSpec]] = []
    try:
        while len(running) < limit:
            spec = MachineSpec("dens" + secrets.token_hex(4), memory_mib=memory_mib)
            if not admitted(rt, spec, disk_bytes, overcommit):
                print(f"admission refused computer {len(running) + 1}")
                break
            machine, _ = await rt.create(spec, img)
            await machine.agent.exec(["true"])
            running.append((machine, spec))
        left = room_for(rt, memory_mib, disk_bytes, overcommit)
        print(
            f"started {len(running)}; admission would still take {left} more "
            f"({len(running) + left} in all)"
        )
        await asyncio.sleep(SETTLE)
        pids = [m.vm.pid for m, _ in running]
        cpu = await cpu_of(pids)
        pss = [float(pss_bytes(p)) for p in pids]
        ram = [float(allocated(str(rt.data_dir.ram_file(s.computer_id)))) for _, s in running]
        print(f"running, idle ({len(running)} computers, CPU over {QUIET:.0f}s):")
        print(f"    host memory (QEMU's PSS)   {stats(pss, 'MiB', MIB)}")
        print(f"    of it, the RAM file        {stats(ram, 'MiB', MIB)}")
        print(f"    CPU (1.0 = a core)         {stats(cpu, 'core')}")
        pause_s, saved = [], []
        for machine, spec in running:
            t = time.perf_counter()
            state = await rt.pause(machine, spec, img)
            pause_s.append(time.perf_counter() - t)
            saved.append(float(state.size))
        print("paused with memory (no process left; its state on the data filesystem):")
        print(f"    host memory                {stats([0.0] * len(running), 'MiB', MIB)}")
        print(f"    saved state on disk        {stats(saved, 'MiB', MIB)}")
        print(f"    pause took                 {stats(pause_s, 's')}")
        per = statistics.median(pss) / MIB
        print(
            f"each running idle computer costs {per:.0f} MiB of host memory for "
            f"{memory_mib} MiB of guest RAM ({per / memory_mib:.2f}x) and "
            f"{statistics.median(cpu) * 100:.1f}% of a core"
        )
    finally:
        for machine, spec in running:
            with contextlib.suppress(Exception):
                await machine.agent.close()
            await rt.destroy(spec.computer_id)
    print(f"whole run {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 6, args[1] if len(args) > 1 else 512))
