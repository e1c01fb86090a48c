"""Exec round trip of `true` (p50, p90 over 200) against the raw channel round trip (ping) in the
same run, and file put/get throughput. Usage: python benchmarks/exec.py [N] [MiB]"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

from _common import computer, data_dir, image, summary

from sanbox.host.runtime import HostRuntime

MIB = 1024**2


async def main(n: int, mib: int) -> None:
    dd = data_dir()
    img = image(dd)
    rt = HostRuntime(dd)
    async with computer(rt, img) as machine:
        agent = machine.agent
        print(f"{machine.isolation}, {n} round trips each, {mib} MiB transfers")
        for _ in range(10):  # warm up
            await agent.ping()
            await agent.exec(["true"])
        pings: list[float] = []
        execs: list[float] = []
        for _ in range(n):
            t0 = time.perf_counter()
            await agent.ping()
            pings.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await agent.exec(["true"])
            execs.append(time.perf_counter() - t0)
        print(summary("channel round trip (ping)", pings))
        print(summary("exec `true` round trip", execs))
        ratio = statistics.median(execs) / statistics.median(pings)
        print(f"{'ratio exec / ping (median)':<44} {ratio:.1f}x")
        with tempfile.NamedTemporaryFile() as src, tempfile.TemporaryDirectory() as out:
            for _ in range(mib):
                src.write(os.urandom(MIB))
            src.flush()
            t0 = time.perf_counter()
            await agent.files.put("/root/bench.bin", src.name)
            put = time.perf_counter() - t0
            t0 = time.perf_counter()
            await agent.files.get_to("/root/bench.bin", os.path.join(out, "back.bin"))
            get = time.perf_counter() - t0
        print(f"{'file put':<44} {mib / put:9.1f} MiB/s  ({put:.2f} s)")
        print(f"{'file get':<44} {mib / get:9.1f} MiB/s  ({get:.2f} s)")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 200, args[1] if len(args) > 1 else 100))
