"""Fork through a real `sanbox server` and the SDK, in one run, to the forks' first exec: one fork
of a running computer, and four at once (until the last of the four has answered `true`), each
round's forks deleted after it; with `exec(["true"])` alone on the source as the floor every
fork pays. Medians and p90s, and the ratio of four forks to one (issue 26's goals: one fork
<= 1 s, four <= 1.5x one).
Usage: python benchmarks/fork_api.py [ROUNDS]   (default 5)"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import data_dir, pct

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.vm.server import ServerProcess  # noqa: E402

from sanbox import Sanbox  # noqa: E402
from sanbox.sdk.sync import Computer  # noqa: E402


def line(name: str, xs: list[float]) -> str:
    return (
        f"{name:<22} median {statistics.median(xs) * 1000:8.1f} ms   "
        f"p90 {pct(xs, 0.9) * 1000:8.1f} ms   (n={len(xs)})"
    )


def timed_fork(source: Computer, count: int) -> float:
    """From the fork request to the last fork's first `true`."""
    t0 = time.perf_counter()
    forks = source.fork(count=count)
    with ThreadPoolExecutor(count) as pool:
        codes = list(pool.map(lambda c: c.exec(["true"]).exit_code, forks))
    took = time.perf_counter() - t0
    assert codes == [0] * count, codes
    for fork in forks:
        fork.delete()
    return took


def main(rounds: int) -> None:
    server = ServerProcess(data_dir(), "bench-fork-server", {"SANBOX_DISK_OVERCOMMIT": "16"})
    server.start()
    try:
        with Sanbox(server.url, server.key, timeout=900) as client:
            source = client.computers.create(idle_timeout=0, memory_mib=512)
            try:
                source.exec(["sh", "-c", "echo state > /root/state"])
                floor = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    source.exec(["true"])
                    floor.append(time.perf_counter() - t0)
                one = [timed_fork(source, 1) for _ in range(rounds)]
                four = [timed_fork(source, 4) for _ in range(rounds)]
            finally:
                source.delete()
    finally:
        server.stop()
    print(f"fork of a running 512 MiB computer through the API, {rounds} rounds (QEMU TCG here)")
    print(line("exec alone (floor)", floor))
    print(line("1 fork to first exec", one))
    print(line("4 forks to last exec", four))
    ratio = statistics.median(four) / statistics.median(one)
    print(f"{'4 forks / 1 fork':<22} {ratio:.2f}x   (goal <= 1.5x; one fork goal <= 1000 ms)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
