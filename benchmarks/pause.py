"""Pause and resume with memory, for 512 MiB and 1 GiB guests with 0 and 300 MiB in use, both ways
of restoring in one run, rounds alternating: `copy` (saved memory checked and copied back into a
shared RAM file in the RAM dir before QEMU starts; SANBOX_RESTORE=copy) and `map` (the saved file
checked in place and mapped privately, copy-on-write: the default). For each: resume to first
exec, and the pause that follows such a resume (after `copy` the RAM file is copied; after `map`
the pages the guest wrote go into the mapped file in place, the default, or, `map+stream`
(SANBOX_PAUSE=stream, the way before), all its RAM comes out of the migration stream), and a
memory snapshot of the resumed computer taken before that pause, the same way (the pages written
since the resume saved while the vCPUs are stopped, the rest copied beside them after; or the
whole RAM streamed): its time and how long its vCPUs were stopped. Also
timed on the same saved state: the verified copy back and the in-place check alone, and a cold
boot for scale.
Usage: python benchmarks/pause.py [ROUNDS] [MEMORY_MIB:USED_MIB ...]"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import statistics
import sys
import time

from _common import computer, data_dir, image, pct

from sanbox.host.data.layout import default_ram_dir
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec
from sanbox.host.saved import memfile, memory

FILL = (
    "nohup python3 -c 'b = bytes([7]) * ({mib} << 20); import time; time.sleep(10**6)' "
    ">/dev/null 2>&1 &"
)
MODES = ("copy", "map", "map+stream")
Times = dict[str, list[float]]


def line(name: str, values: list[float]) -> str:
    return f"{name} median {statistics.median(values):.3f}s p90 {pct(values, 0.9):.3f}s"


async def round_of(
    rt: HostRuntime, m: Machine, spec: MachineSpec, after: str, mode: str, times: Times
) -> None:
    """Pause (`after` says how the VM was started), time both memory checks, resume by `mode`."""
    img = image(rt.data_dir)
    pause = "stream" if after == "map+stream" else "in-place"
    rt.machines.settings = dataclasses.replace(rt.machines.settings, pause=pause)
    if after != "boot":  # a memory snapshot of the resumed computer, the pause's way
        sid = "snp_" + secrets.token_hex(6)
        t = time.perf_counter()
        snap = await rt.snapshot(sid, m.computer_id, m, spec, img, memory=True)
        times.setdefault(f"snapshot after {after}", []).append(time.perf_counter() - t)
        times.setdefault(f"  vCPUs stopped {after}", []).append(snap.paused_seconds)
        await rt.delete_snapshot(sid)
    t = time.perf_counter()
    saved = await rt.pause(m, spec, img)
    times[f"pause after {after}"].append(time.perf_counter() - t)
    times["state MiB"].append(saved.size / 2**20)
    state = m.dir.state
    scratch = default_ram_dir() / f"sanbox-bench-{m.computer_id}.ram"
    t = time.perf_counter()
    await asyncio.to_thread(memory.restore_memory, state, saved, scratch, rt.memory_key)
    times["verified copy back"].append(time.perf_counter() - t)
    scratch.unlink()
    t = time.perf_counter()
    await asyncio.to_thread(
        memfile.verify, state / memory.MEMORY, saved.memory_bytes, saved.chunks(), rt.memory_key
    )
    times["in-place check"].append(time.perf_counter() - t)
    restore = "copy" if mode == "copy" else "map"
    rt.machines.settings = dataclasses.replace(rt.machines.settings, restore=restore)
    t = time.perf_counter()
    resumed, outcome = await rt.resume(spec, img)
    await resumed.agent.exec(["true"])
    times[f"resume->exec {mode}"].append(time.perf_counter() - t)
    assert outcome.restored, outcome
    m.vm, m.agent = resumed.vm, resumed.agent


async def one(rt: HostRuntime, memory_mib: int, used_mib: int, rounds: int) -> None:
    img = image(rt.data_dir)
    t0 = time.perf_counter()
    async with computer(rt, img, memory_mib=memory_mib) as m:
        await m.agent.exec(["true"])
        cold = time.perf_counter() - t0
        if used_mib:
            await m.agent.exec(FILL.format(mib=used_mib))
            used = "$(free -m | awk '/Mem:/ {print $3}')"
            await m.agent.exec(f"while [ {used} -lt {used_mib} ]; do sleep 0.2; done")
        spec = MachineSpec(m.computer_id, memory_mib=memory_mib)
        times: Times = {}
        for key in ("state MiB", "verified copy back", "in-place check", "pause after boot"):
            times[key] = []
        for mode in MODES:
            times[f"resume->exec {mode}"], times[f"pause after {mode}"] = [], []
        after = "boot"
        for i in range(len(MODES) * rounds):
            mode = MODES[i % len(MODES)]
            await round_of(rt, m, spec, after, mode, times)
            after = mode
    print(
        f"{memory_mib:>5} MiB guest, {used_mib:>3} MiB in use, cold boot->exec {cold:.2f}s, "
        f"state median {statistics.median(times.pop('state MiB')):.1f} MiB"
    )
    for name, values in times.items():
        if values:
            print(f"    {line(f'{name:<22}', values)}  (n={len(values)})")
    copy, mapped = (statistics.median(times[f"resume->exec {m}"]) for m in MODES[:2])
    print(f"    resume map/copy {mapped / copy:.2f}, saves {copy - mapped:.3f}s a resume")
    before, now = (statistics.median(times[f"pause after {m}"]) for m in ("map+stream", "map"))
    print(f"    pause after map, in place/stream {now / before:.2f}")
    snapshot = (("snapshot after map", "snapshot after"), ("vCPUs stopped", "  vCPUs stopped"))
    for label, key in snapshot:
        before, now = (statistics.median(times[f"{key} {m}"]) for m in ("map+stream", "map"))
        print(f"    {label}, written pages/stream {now / before:.2f}")


async def main(rounds: int, shapes: list[tuple[int, int]]) -> None:
    dd = data_dir()
    rt = HostRuntime(dd)
    print(f"{(await rt.hypervisor(image(dd))).isolation}, {rounds} rounds of each way")
    for memory_mib, used in shapes:
        await one(rt, memory_mib, used, rounds)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    asked = [tuple(int(x) for x in a.split(":")) for a in sys.argv[2:]]
    default = [(512, 0), (1024, 0), (1024, 300)]
    asyncio.run(main(n, [(a[0], a[1]) for a in asked] or default))
