"""Create to first exec, through a real `sanbox server` and the SDK, in one run: for a template
built from examples/templates/notes,
- boot: a create that asks for more memory than the template's ready snapshot has, so it boots
  its built disk (what every create did before ready snapshots);
- restore: a create restored from the template's ready snapshot, with its own identity;
- claim: a create served by a warm pool of the template (`pool set --size 2`), the pool
  refilled between rounds (its refill is not timed: a claim is).
Each round times `computers.create(...)` until `exec(["true"])` has answered, then deletes the
computer. Medians, p90 and p99, and the ratios to boot; and, as the floor every mode pays, an
`exec(["true"])` alone on a running computer of the template.
Usage: python benchmarks/create.py [ROUNDS [MODE...]]   (default 20; modes boot restore claim)"""

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
    return (
        f"{name:<10} median {med * 1000:9.1f} ms   p90 {pct(xs, 0.9) * 1000:9.1f} ms   "
        f"p99 {pct(xs, 0.99) * 1000:9.1f} ms   (n={len(xs)}){ratio}"
    )


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


def exec_floor(client: Sanbox, rounds: int) -> list[float]:
    c = client.computers.create(template="notes", idle_timeout=0)
    try:
        c.exec(["true"])
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            c.exec(["true"])
            out.append(time.perf_counter() - t0)
        return out
    finally:
        c.delete()


def main(rounds: int, modes: list[str]) -> None:
    server = ServerProcess(data_dir(), "bench-create-server", {"SANBOX_DISK_OVERCOMMIT": "16"})
    server.start()
    try:
        with Sanbox(server.url, server.key, timeout=900) as client:
            t0 = time.perf_counter()
            started = client.templates.build(SPEC)
            template = client.templates.wait("notes") if started.building else started.template
            took = time.perf_counter() - t0
            print(
                f"template notes: built in {took:.1f}s here ({template.steps} steps, "
                f"{template.cached_steps} reused); {template.memory_mib} MiB; "
                f"ready snapshot: {template.ready_snapshot}"
            )
            more = template.memory_mib + 256
            results: dict[str, list[float]] = {"exec": exec_floor(client, rounds)}
            if "boot" in modes:
                results["boot"] = [timed_create(client, memory_mib=more) for _ in range(rounds)]
            if "restore" in modes:
                results["restore"] = [timed_create(client) for _ in range(rounds)]
            if "claim" in modes:
                client.pools.set("notes", 2)
                claim = []
                for _ in range(rounds):
                    wait_ready(client, 2)
                    claim.append(timed_create(client))
                results["claim"] = claim
                client.pools.set("notes", 0)
            deadline = time.monotonic() + 120
            while client.pools.list()[0].ready and time.monotonic() < deadline:
                time.sleep(0.2)  # members discarded before the server stops
        base = statistics.median(results["boot"]) if "boot" in results else None
        print(f"create to first exec, {rounds} rounds each (QEMU TCG on this host):")
        for name, xs in results.items():
            print(
                line(name if name != "exec" else "exec only", xs, base if name != "boot" else None)
            )
        if "claim" in results and "restore" in results:
            ratio = statistics.median(results["claim"]) / statistics.median(results["restore"])
            print(f"claim/restore {ratio:.3f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 20, sys.argv[2:] or ["boot", "restore", "claim"]
    )
