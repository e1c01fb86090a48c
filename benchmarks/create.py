"""Create to first exec, through a real `sanbox server` and the SDK, in one run: for a template
built from examples/templates/notes,
- boot: a create that asks for more memory than the template's ready snapshot has, so it boots
  its built disk (what every create did before ready snapshots);
- restore: a create restored from the template's ready snapshot, with its own identity;
- claim: a create served by a warm pool of the template (`pool set --size 2`), the pool
  refilled between rounds (its refill is not timed: a claim is).
Each round times `computers.create(...)` until `exec(["true"])` has answered, then deletes the
computer. Medians, p90 and p99, and the ratios to boot.
Usage: python benchmarks/create.py [ROUNDS]   (default 20)"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from _common import data_dir, pct

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.vm.server import ServerProcess  # noqa: E402

from sanbox import Sanbox  # noqa: E402

SPEC = Path(__file__).parents[1] / "examples" / "templates" / "notes"


def line(name: str, xs: list[float], base: float | None) -> str:
    med = statistics.median(xs)
    ratio = f"   {med / base:6.3f}x boot" if base else ""
    return (f"{name:<10} median {med * 1000:9.1f} ms   p90 {pct(xs, 0.9) * 1000:9.1f} ms   "
            f"p99 {pct(xs, 0.99) * 1000:9.1f} ms   (n={len(xs)}){ratio}")  # fmt: skip


def timed_create(client: Sanbox, **kwargs: object) -> float:
    t0 = time.perf_counter()
    c = client.computers.create(template="notes", idle_timeout=0, **kwargs)  # type: ignore[arg-type]
    r = c.exec(["true"])
    took = time.perf_counter() - t0
    assert r.exit_code == 0, r
    c.delete()
    return took


def wait_ready(client: Sanbox, size: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pools = {p.template: p for p in client.pools.list()}
        pool = pools.get("notes")
        if pool is not None and pool.ready >= size:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the pool never filled: {pool}")
        time.sleep(0.2)


def main(rounds: int) -> None:
    server = ServerProcess(data_dir(), "bench-create-server", {"SANBOX_DISK_OVERCOMMIT": "16"})
    server.start()
    try:
        with Sanbox(server.url, server.key, timeout=900) as client:
            t0 = time.perf_counter()
            started = client.templates.build(SPEC)
            template = client.templates.wait("notes") if started.building else started.template
            took = time.perf_counter() - t0
            print(f"template notes: built in {took:.1f}s here ({template.steps} steps, "
                  f"{template.cached_steps} reused); {template.memory_mib} MiB; "
                  f"ready snapshot: {template.ready_snapshot}")  # fmt: skip
            more = template.memory_mib + 256
            boot = [timed_create(client, memory_mib=more) for _ in range(rounds)]
            restore = [timed_create(client) for _ in range(rounds)]
            client.pools.set("notes", 2)
            claim = []
            for _ in range(rounds):
                wait_ready(client, 2)
                claim.append(timed_create(client))
            client.pools.set("notes", 0)
            deadline = time.monotonic() + 120
            while client.pools.list()[0].ready and time.monotonic() < deadline:
                time.sleep(0.2)  # members discarded before the server stops
        base = statistics.median(boot)
        print(f"create to first exec, {rounds} rounds each (QEMU TCG on this host):")
        print(line("boot", boot, None))
        print(line("restore", restore, base))
        print(line("claim", claim, base))
        print(f"claim/restore {statistics.median(claim) / statistics.median(restore):.3f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
