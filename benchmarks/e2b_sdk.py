"""E2B's SDK against Sanbox's own, through one real `sanbox server` with real guests, in one run:
- `commands.run("true")` through the E2B SDK (envd's Start stream: `/bin/bash -l -c true` as
  the default user) against the same command through Sanbox's SDK (`exec`, as `user`) on the
  same computer; and Sanbox's `exec(["true"])` as the floor;
- `Sandbox.create("base")` through the E2B SDK against `computers.create(template="base")`
  through Sanbox's, both served by a warm pool of `base` (refilled between rounds, untimed),
  each until its first command has answered.
Medians and p90s, and the E2B path's ratio to Sanbox's own (the goal: 1.2x or less).
Usage: python benchmarks/e2b_sdk.py [ROUNDS]   (default 20)"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import data_dir, pct
from e2b import Sandbox

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.vm.server import ServerProcess  # noqa: E402

from sanbox import Sanbox  # noqa: E402

BASH_TRUE = ["/bin/bash", "-l", "-c", "true"]


def timed(rounds: int, call: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def line(name: str, xs: list[float], base: list[float] | None = None) -> str:
    med = statistics.median(xs)
    ratio = f"   {med / statistics.median(base):5.2f}x Sanbox's" if base else ""
    return (
        f"{name:<34} median {med * 1000:8.1f} ms   p90 {pct(xs, 0.9) * 1000:8.1f} ms"
        f"   (n={len(xs)}){ratio}"
    )


def wait_pool(client: Sanbox, ready: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not any(p.template == "base" and p.ready >= ready for p in client.pools.list()):
        if time.monotonic() > deadline:
            raise SystemExit("the pool of base never filled")
        time.sleep(0.1)


def main(rounds: int) -> None:
    server = ServerProcess(data_dir(), "bench-e2b-server", {"SANBOX_DISK_OVERCOMMIT": "16"})
    server.start()
    os.environ.update(
        E2B_API_KEY=server.key,
        E2B_API_URL=f"{server.url}/e2b",
        E2B_SANDBOX_URL=f"{server.url}/e2b-envd",
    )
    try:
        with Sanbox(server.url, server.key, timeout=900) as client:
            sbx = Sandbox.create("base", timeout=3600)
            sbx.commands.run("true")  # the default user is made on the first call
            same = client.computers.get(sbx.sandbox_id.replace("-", "_", 1))
            e2b_run = timed(rounds, lambda: sbx.commands.run("true"))
            own_run = timed(rounds, lambda: same.exec(BASH_TRUE, user="user"))
            floor = timed(rounds, lambda: same.exec(["true"]))
            sbx.kill()

            client.pools.set("base", 2)
            e2b_create, own_create = [], []
            for _ in range(rounds):
                wait_pool(client, 2)
                t0 = time.perf_counter()
                made = Sandbox.create("base")
                made.commands.run("true", user="root")
                e2b_create.append(time.perf_counter() - t0)
                made.kill()
                wait_pool(client, 2)
                t0 = time.perf_counter()
                own = client.computers.create(template="base")
                own.exec(BASH_TRUE)
                own_create.append(time.perf_counter() - t0)
                own.delete()
            client.pools.set("base", 0)
            deadline = time.monotonic() + 120  # members are VMs of their own: gone before the
            while time.monotonic() < deadline and any(  # server stops, or they outlive it
                p.ready or p.starting for p in client.pools.list()
            ):
                time.sleep(0.2)
    finally:
        server.stop()
    print(line("sanbox exec ['true'] (floor)", floor))
    print(line("sanbox exec bash -l -c true", own_run))
    print(line("e2b commands.run('true')", e2b_run, own_run))
    print(line("sanbox create (pool) + exec", own_create))
    print(line("e2b Sandbox.create (pool) + run", e2b_create, own_create))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
