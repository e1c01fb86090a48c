"""Where an exec's time goes, in one run: the raw channel round trip (ping: in a row, each right
after an exec, and each after the guest idled 20 ms: waking it costs), the same spawn timed inside
the guest itself (`true`, and `sh -c true`), exec `true` through the agent client, through the
HTTP API of a real `sanbox server`, and `sanbox exec NAME -- true` as a user types it (wall time of
the whole CLI process), with the ratios; then file put/get throughput. Run it again with
SANBOX_TCG_ASLR=off to time emulated guests without address randomization.

A guest just booted runs its first few hundred processes slower (under TCG here: exec `true` fell
from 41 to 28 ms over its first 150), so each computer first runs WARM_UP execs, and the spawn
inside the guest is timed on the same computer in blocks between the execs it is compared with.
Usage: python benchmarks/exec.py [N] [MiB]"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import computer, data_dir, image, summary

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.vm.server import BIN, ServerProcess  # noqa: E402

from sanbox.host.runtime import HostRuntime  # noqa: E402

MIB = 1024**2
WARM_UP = 250
BLOCKS = 4  # exec and in-guest spawn timed in turns
IDLE = 0.02  # a round trip costs more the longer the guest idled before it (waking it up)
# runs inside the guest: the spawn the agent makes for `exec true`, timed by the guest's clock
IN_GUEST = r"""
import json, statistics, subprocess, sys, time
def median_ms(argv, n):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.Popen(argv, start_new_session=True, close_fds=True, cwd="/root").wait()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs) * 1000
n = int(sys.argv[1])
print(json.dumps({"true": median_ms(["true"], n), "sh": median_ms(["sh", "-c", "true"], n)}))
"""


def med_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def spawn_inside(n: int) -> list[str]:
    """The command that times a block of the guest's own spawns (medians in ms, as JSON)."""
    return ["python3", "-c", IN_GUEST, str(max(5, n // BLOCKS))]


async def agent_side(n: int, mib: int) -> dict[str, float]:
    dd = data_dir()
    rt = HostRuntime(dd)
    async with computer(rt, image(dd)) as machine:
        agent = machine.agent
        print(f"{machine.isolation}, {n} round trips each, {mib} MiB transfers")
        for _ in range(WARM_UP):
            await agent.exec(["true"])
        alone: list[float] = []  # pings one after the other: nothing left of an exec to finish
        idle: list[float] = []  # each after the guest (and this host) idled IDLE seconds
        for _ in range(n):
            t0 = time.perf_counter()
            await agent.ping()
            alone.append(time.perf_counter() - t0)
        for _ in range(n):
            await asyncio.sleep(IDLE)
            t0 = time.perf_counter()
            await agent.ping()
            idle.append(time.perf_counter() - t0)
        pings: list[float] = []
        execs: list[float] = []
        inside: dict[str, list[float]] = {"true": [], "sh": []}
        for _ in range(BLOCKS):
            for _ in range(n // BLOCKS):
                t0 = time.perf_counter()
                await agent.ping()
                pings.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await agent.exec(["true"])
                execs.append(time.perf_counter() - t0)
            block = json.loads((await agent.exec(spawn_inside(n))).stdout)
            for key, value in block.items():
                inside[key].append(value)
        print(summary("channel round trip (ping), pings in a row", alone))
        print(summary("channel round trip (ping), each after an exec", pings))
        print(summary(f"channel round trip (ping), after {IDLE * 1000:.0f} ms idle", idle))
        spawn = {key: statistics.median(values) for key, values in inside.items()}
        print(f"{'spawn of `true`, timed inside the guest':<44} median {spawn['true']:9.3f} ms")
        print(f"{'spawn of `sh -c true`, inside the guest':<44} median {spawn['sh']:9.3f} ms")
        print(summary("exec `true`, agent client", execs))
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
        return {"ping": med_ms(pings), "agent": med_ms(execs), "inside": spawn["true"]}


def server_side(n: int) -> dict[str, float]:
    server = ServerProcess(data_dir(), "bench-exec-server")
    server.start()
    try:
        headers = {"Authorization": f"Bearer {server.key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=300) as client:
            client.post("/v1/computers", json={"name": "bench"}).raise_for_status()
            for _ in range(WARM_UP):
                client.post("/v1/computers/bench/exec", json={"cmd": ["true"]}).raise_for_status()
            api: list[float] = []
            inside: list[float] = []
            for _ in range(BLOCKS):
                for _ in range(n // BLOCKS):
                    t0 = time.perf_counter()
                    done = client.post("/v1/computers/bench/exec", json={"cmd": ["true"]})
                    api.append(time.perf_counter() - t0)
                    done.raise_for_status()
                block = client.post("/v1/computers/bench/exec", json={"cmd": spawn_inside(n)})
                inside.append(json.loads(block.raise_for_status().json()["stdout"])["true"])
            env = {**os.environ, "SANBOX_CONFIG": str(server.config)}
            cli = []
            for _ in range(min(n, 30)):
                t0 = time.perf_counter()
                subprocess.run([str(BIN), "exec", "bench", "--", "true"], env=env, check=True)
                cli.append(time.perf_counter() - t0)
            client.delete("/v1/computers/bench").raise_for_status()
        spawn = statistics.median(inside)
        print(summary("exec `true`, HTTP API (POST /exec)", api))
        print(f"{'spawn of `true`, inside that computer':<44} median {spawn:9.3f} ms")
        print(summary("`sanbox exec bench -- true`, wall time", cli))
        return {"api": med_ms(api), "cli": med_ms(cli), "inside": spawn}
    finally:
        server.stop()
        import shutil

        shutil.rmtree(server.data_dir.root, ignore_errors=True)


def main(n: int, mib: int) -> None:
    a = asyncio.run(agent_side(n, mib))
    s = server_side(n)
    print(f"{'ratio agent exec / ping':<44} {a['agent'] / a['ping']:.2f}x")
    print(f"{'ratio agent exec / spawn inside the guest':<44} {a['agent'] / a['inside']:.2f}x")
    print(f"{'ratio API exec / spawn inside the guest':<44} {s['api'] / s['inside']:.2f}x")
    print(f"{'ratio API exec / agent exec':<44} {s['api'] / a['agent']:.2f}x")
    print(f"{'CLI wall time - API exec':<44} {(s['cli'] - s['api']) / 1000:.3f} s")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(args[0] if args else 200, args[1] if len(args) > 1 else 100)
