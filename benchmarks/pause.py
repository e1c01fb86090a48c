"""Pause and resume with memory, for 512 MiB and 1 GiB guests with 0 and 300 MiB in use: pause
time, state size, resume to first exec, and resume against a cold boot measured in the same run.
Usage: python benchmarks/pause.py [ROUNDS]"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from _common import computer, data_dir, image, pct

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
        pauses, resumes, sizes = [], [], []
        for _ in range(rounds):
            t = time.perf_counter()
            saved = await rt.pause(m, spec, img)
            pauses.append(time.perf_counter() - t)
            sizes.append(saved.size)
            t = time.perf_counter()
            resumed, outcome = await rt.resume(spec, img)
            await resumed.agent.exec(["true"])
            resumes.append(time.perf_counter() - t)
            assert outcome.restored, outcome
            m.vm, m.agent = resumed.vm, resumed.agent
    med_resume = statistics.median(resumes)
    print(
        f"{memory_mib:>5} MiB guest, {used_mib:>3} MiB in use | pause median "
        f"{statistics.median(pauses):.3f}s p90 {pct(pauses, 0.9):.3f}s | state "
        f"{statistics.median(sizes) / 2**20:6.1f} MiB | resume->exec median {med_resume:.3f}s "
        f"p90 {pct(resumes, 0.9):.3f}s | cold boot->exec {cold:.2f}s | resume/cold "
        f"{med_resume / cold:.2f}"
    )


async def main(rounds: int) -> None:
    dd = data_dir()
    rt = HostRuntime(dd)
    print(f"{(await rt.hypervisor(image(dd))).isolation}, {rounds} pause/resume rounds each")
    for memory_mib in (512, 1024):
        for used in (0, 300):
            await one(rt, memory_mib, used, rounds)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
