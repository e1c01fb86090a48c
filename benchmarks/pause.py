"""Pause and resume with memory, for 512 MiB and 1 GiB guests with 0 and 300 MiB in use: pause
time, state size, resume to first exec, and resume against a cold boot measured in the same run.
The copy of saved memory back into the RAM file is timed both ways on the same saved state: the
verified copy resume does now (every chunk checked against its keyed BLAKE3 digest) and the plain
sparse copy it did before, with their ratio.
Usage: python benchmarks/pause.py [ROUNDS]"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from _common import computer, data_dir, image, pct

from sanbox.host import memory
from sanbox.host.disk.clone import sparse_copy_path
from sanbox.host.layout import default_ram_dir
from sanbox.host.runtime import HostRuntime, MachineSpec

FILL = "nohup python3 -c 'b = bytes([7]) * ({mib} << 20); import time; time.sleep(10**6)' " \
    ">/dev/null 2>&1 &"  # fmt: skip


async def one(rt: HostRuntime, memory_mib: int, used_mib: int, rounds: int) -> None:
    img = image(rt.data_dir)
    t0 = time.perf_counter()
    async with computer(rt, img, memory_mib=memory_mib) as m:
        cold = time.perf_counter() - t0
        await m.agent.exec(["true"])
        cold = time.perf_counter() - t0
        if used_mib:
            await m.agent.exec(FILL.format(mib=used_mib))
            used = "$(free -m | awk '/Mem:/ {print $3}')"
            await m.agent.exec(f"while [ {used} -lt {used_mib} ]; do sleep 0.2; done")
        spec = MachineSpec(m.computer_id, memory_mib=memory_mib)
        pauses, resumes, sizes, plain, verified = [], [], [], [], []
        for _ in range(rounds):
            t = time.perf_counter()
            saved = await rt.pause(m, spec, img)
            pauses.append(time.perf_counter() - t)
            sizes.append(saved.size)
            scratch = default_ram_dir() / f"sanbox-bench-{m.computer_id}.ram"
            for way, times in ((copy_plain, plain), (copy_verified, verified)):
                t = time.perf_counter()
                await asyncio.to_thread(way, rt, m.dir.state, saved, scratch)
                times.append(time.perf_counter() - t)
                scratch.unlink()
            t = time.perf_counter()
            resumed, outcome = await rt.resume(spec, img)
            await resumed.agent.exec(["true"])
            resumes.append(time.perf_counter() - t)
            assert outcome.restored, outcome
            m.vm, m.agent = resumed.vm, resumed.agent
    med_resume = statistics.median(resumes)
    med_plain, med_verified = statistics.median(plain), statistics.median(verified)
    print(
        f"{memory_mib:>5} MiB guest, {used_mib:>3} MiB in use | pause median "
        f"{statistics.median(pauses):.3f}s p90 {pct(pauses, 0.9):.3f}s | state "
        f"{statistics.median(sizes) / 2**20:6.1f} MiB | resume->exec median {med_resume:.3f}s "
        f"p90 {pct(resumes, 0.9):.3f}s | cold boot->exec {cold:.2f}s | resume/cold "
        f"{med_resume / cold:.2f}\n"
        f"{'':>29}| copy back, plain {med_plain:.3f}s, verified {med_verified:.3f}s "
        f"({med_verified / med_plain:.2f}x)"
    )


def copy_plain(_rt: HostRuntime, state: Path, _saved: memory.SavedState, ram: Path) -> None:
    sparse_copy_path(state / memory.MEMORY, ram)


def copy_verified(rt: HostRuntime, state: Path, saved: memory.SavedState, ram: Path) -> None:
    memory.restore_memory(state, saved, ram, rt.memory_key)


async def main(rounds: int) -> None:
    dd = data_dir()
    rt = HostRuntime(dd)
    print(f"{(await rt.hypervisor(image(dd))).isolation}, {rounds} pause/resume rounds each")
    for memory_mib in (512, 1024):
        for used in (0, 300):
            await one(rt, memory_mib, used, rounds)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
