"""Forks and snapshots at the host layer, in one run:
- fork of a running computer to the first exec in the fork (fork called with one child, until
  `true` has run in it), for a computer on the smallest disk the host accepts and one on a 20 GiB
  disk, rounds alternating, side by side with their ratio (fork cost should not grow with disk
  size); the fork is destroyed and its layers collected after each round;
- snapshot create time with memory, for a 1 GiB guest with as much RAM in use as fits, and how
  long its vCPUs stopped, both ways alternating: `stopped` (before; SANBOX_SNAPSHOT=stopped:
  the vCPUs stop while the RAM file is copied) and `live` (the RAM copied as the guest runs,
  the vCPUs stopped for the last pages; goal: paused <= 0.3 s);
- resume of a 1 GiB guest with 750 MiB in use, both ways of restoring alternating
  (SANBOX_RESTORE=copy: the saved memory copied back first; default map: mapped in place), by
  pause.py's rounds.
Usage: python benchmarks/fork.py [ROUNDS]"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import statistics
import sys
import time

import pause
from _common import computer, data_dir, image, pct, used_mib

from sanbox.host.disk import DiskTooSmallError
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec

FORK_MEMORY_MIB = 512
BIG_DISK_GIB = 20
ASKED_DISK_GIB = 1  # what the issue asks for; the image's filesystem may be larger
SNAP_MEMORY_MIB = 1024
SNAP_USED_MIB = 750  # what fits beside the kernel and the agent in 1 GiB
SNAPSHOT_MODES = ("stopped", "live")


def stats(values: list[float]) -> str:
    return f"median {statistics.median(values):7.3f}s  p90 {pct(values, 0.9):7.3f}s"


async def smallest_disk(rt: HostRuntime, img: Image) -> int | None:
    """ASKED_DISK_GIB if the host layer takes it, else None (the image's size), saying why."""
    spec = MachineSpec(
        "bench" + secrets.token_hex(4), memory_mib=FORK_MEMORY_MIB, disk_gib=ASKED_DISK_GIB
    )
    cdir = rt.data_dir.computer(spec.computer_id)
    cdir.root.mkdir(parents=True)
    try:
        await asyncio.to_thread(rt.disks.create, img.rootfs, cdir, ASKED_DISK_GIB * 2**30)
    except DiskTooSmallError as exc:
        print(
            f"small disk: the image's size, {img.disk_size_gib} GiB; {ASKED_DISK_GIB} GiB "
            f"refused: {exc}"
        )
        return None
    finally:
        await rt.destroy(spec.computer_id)
    print(f"small disk: {ASKED_DISK_GIB} GiB")
    return ASKED_DISK_GIB


async def fork_to_exec(rt: HostRuntime, img: Image, parent: Machine) -> float:
    """One fork of the running `parent` to `true` in the child; the child is then removed."""
    spec = MachineSpec(parent.computer_id, memory_mib=FORK_MEMORY_MIB)
    cid = "benchfork" + secrets.token_hex(4)
    child_spec = MachineSpec(cid, hostname=cid, memory_mib=FORK_MEMORY_MIB)
    t = time.perf_counter()
    (child,) = await rt.fork(parent, spec, img, [child_spec])
    try:
        await child.agent.exec(["true"])
        return time.perf_counter() - t
    finally:
        await child.agent.close()
        await rt.destroy(cid)
        await rt.gc_layers()


async def forks(rt: HostRuntime, img: Image, rounds: int) -> None:
    small = await smallest_disk(rt, img)
    sizes = {
        f"{small or img.disk_size_gib} GiB disk": small,
        f"{BIG_DISK_GIB} GiB disk": BIG_DISK_GIB,
    }
    times: dict[str, list[float]] = {name: [] for name in sizes}
    async with contextlib.AsyncExitStack() as stack:
        parents = {
            name: await stack.enter_async_context(
                computer(rt, img, memory_mib=FORK_MEMORY_MIB, disk_gib=gib)
            )
            for name, gib in sizes.items()
        }
        for parent in parents.values():
            await parent.agent.exec(["true"])
        for _ in range(rounds):
            for name, parent in parents.items():
                times[name].append(await fork_to_exec(rt, img, parent))
    what = f"fork of a running {FORK_MEMORY_MIB} MiB computer -> first exec in the fork"
    print(f"{what}, {rounds} rounds")
    for name, values in times.items():
        print(f"    {name:<12} {stats(values)}  (n={len(values)})")
    small_name, big_name = sizes
    ratio = statistics.median(times[big_name]) / statistics.median(times[small_name])
    print(f"    {big_name} / {small_name}: {ratio:.2f} (goal under 1.2)")


async def snapshots(rt: HostRuntime, img: Image, rounds: int) -> None:
    async with computer(rt, img, memory_mib=SNAP_MEMORY_MIB) as m:
        await m.agent.exec(pause.FILL.format(mib=SNAP_USED_MIB))
        deadline = time.monotonic() + 120
        while await used_mib(m) < SNAP_USED_MIB:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the guest never had {SNAP_USED_MIB} MiB in use")
            await asyncio.sleep(0.2)
        used = await used_mib(m)
        spec = MachineSpec(m.computer_id, memory_mib=SNAP_MEMORY_MIB)
        times: dict[str, list[float]] = {mode: [] for mode in SNAPSHOT_MODES}
        paused: dict[str, list[float]] = {mode: [] for mode in SNAPSHOT_MODES}
        sizes = []
        for _ in range(rounds):
            for mode in SNAPSHOT_MODES:
                rt.machines.settings = dataclasses.replace(rt.machines.settings, snapshot=mode)
                sid = "snp_bench" + secrets.token_hex(6)
                t = time.perf_counter()
                snap = await rt.snapshot(sid, m.computer_id, m, spec, img, memory=True)
                times[mode].append(time.perf_counter() - t)
                sizes.append(snap.size_bytes / 2**20)
                paused[mode].append(snap.paused_seconds)
                await rt.delete_snapshot(sid)
                await m.agent.exec(["true"])  # the source runs on
    print(
        f"snapshot with memory of a running {SNAP_MEMORY_MIB} MiB guest, {used} MiB in use "
        f"(free -m), {rounds} rounds each way"
    )
    if not (await rt.hypervisor(img)).capabilities.live_memory_save:
        print("    (this hypervisor saves no memory live: `live` below is a stopped save)")
    for mode in SNAPSHOT_MODES:
        print(f"    {mode:<8} create       {stats(times[mode])}")
        print(f"    {mode:<8} vCPUs paused {stats(paused[mode])}")
    ratio = statistics.median(paused["live"]) / statistics.median(paused["stopped"])
    print(f"    vCPUs paused live / stopped: {ratio:.3f} (goal: live <= 0.3 s)")
    print(f"    size median {statistics.median(sizes):.1f} MiB (its layer and its memory)")


async def main(rounds: int) -> None:
    started = time.perf_counter()
    rt = HostRuntime(data_dir())
    img = image(rt.data_dir)
    print(f"{(await rt.hypervisor(img)).isolation}, image {img.build_id}")
    try:
        await forks(rt, img, rounds)
        await snapshots(rt, img, rounds)
    finally:
        await rt.gc_layers()  # those the destroyed sources stood on
    print("resume of a 1 GiB guest, copy (before) and map (after the no-copy restore):")
    await pause.one(rt, SNAP_MEMORY_MIB, SNAP_USED_MIB, max(1, rounds // 2))
    print(f"whole run {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
