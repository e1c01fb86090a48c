"""The cost of usage metering, in one run:
- a state write (the transaction of a transition) with and without the usage ledger's hook, on
  the SQLite store (in process: the part metering adds is this transaction's);
- through a real `sanbox server` and real guests, with metering on (usage checked every 0.5 s,
  ten times the default rate) and off (`SANBOX_METERING=0`): `exec(["true"])` on a running
  computer, and a create until the first exec answers (then a delete, not timed);
- `GET /v1/usage` (JSON by computer and by day, CSV) over 100,000 intervals of one org.
Medians and p90s.
Usage: python benchmarks/usage.py [ROUNDS]   (default 10 creates and 10x10 execs per mode)"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx
from _common import data_dir, summary
from sqlalchemy import Table

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.vm.server import ServerProcess  # noqa: E402

from sanbox import Sanbox  # noqa: E402
from sanbox.control.usage import Ledger  # noqa: E402
from sanbox.store import Database, repo  # noqa: E402
from sanbox.store.db import sqlite_url  # noqa: E402
from sanbox.store.models import ComputerRow, UsageRow  # noqa: E402

INTERVALS = 100_000


def state_writes(metered: bool, n: int = 500) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(sqlite_url(Path(tmp) / "bench.db"))
        db.migrate()
        if metered:
            Ledger().install(db)
        with db.session() as s:
            org = repo.create_org(s, "bench")
            s.add(
                ComputerRow(
                    id="cmp_bench",
                    org_id=org.id,
                    name="b",
                    template="base",
                    state="running",
                    vcpus=1,
                    memory_mib=512,
                    disk_gib=1,
                )
            )
        took = []
        for i in range(n):
            t0 = time.perf_counter()
            with db.session() as s:
                row = s.get(ComputerRow, "cmp_bench")
                assert row is not None
                row.state = "stopped" if i % 2 == 0 else "running"
                repo.add_event(s, org.id, row.id, "computer.bench", "a transition")
            took.append(time.perf_counter() - t0)
        db.close()
    return took


def through_the_server(metering: bool, rounds: int) -> tuple[list[float], list[float], str]:
    env = {
        "SANBOX_DISK_OVERCOMMIT": "16",
        "SANBOX_METERING": "1" if metering else "0",
        "SANBOX_USAGE_SAMPLE_INTERVAL": "0.5",
    }
    server = ServerProcess(data_dir(), f"bench-usage-{int(metering)}", env)
    server.start()
    execs, creates = [], []
    try:
        with Sanbox(server.url, server.key, timeout=900) as client:
            c = client.computers.create(idle_timeout=0)
            c.exec(["true"])
            for _ in range(rounds * 10):
                t0 = time.perf_counter()
                c.exec(["true"])
                execs.append(time.perf_counter() - t0)
            c.delete()
            for _ in range(rounds):
                t0 = time.perf_counter()
                made = client.computers.create(idle_timeout=0)
                made.exec(["true"])
                creates.append(time.perf_counter() - t0)
                made.delete()
    finally:
        server.stop()
    return execs, creates, str(server.data_dir.root / "sanbox.db") if metering else ""


def usage_reads(server: ServerProcess, db_path: str, rounds: int) -> dict[str, list[float]]:
    """100,000 closed 60 s intervals of 100 computers of the server's org, then its reads."""
    db = Database(sqlite_url(Path(db_path)))
    with db.session() as s:
        org = repo.org_by_name(s, "default")
        assert org is not None
        start = datetime.now(UTC) - timedelta(seconds=60 * INTERVALS // 100)
        rows = [
            dict(
                kind="computer",
                org_id=org.id,
                computer_id=f"cmp_bench{i % 100:03d}",
                ordinal=i // 100 + 1,
                name=f"bench-{i % 100}",
                template="base",
                state="running" if i % 3 else "stopped",
                vcpus=2,
                memory_mib=1024,
                disk_gib=8,
                started_at=start + timedelta(seconds=60 * (i // 100)),
                ended_at=start + timedelta(seconds=60 * (i // 100 + 1)),
                checked_at=start,
                cpu_seconds=1.5,
                seq=10_000_000 + i,
            )
            for i in range(INTERVALS)
        ]
        s.execute(cast(Table, UsageRow.__table__).insert(), rows)  # a mapped class's table
    db.close()
    since = (start - timedelta(seconds=1)).isoformat()
    out: dict[str, list[float]] = {}
    headers = {"Authorization": f"Bearer {server.key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=300) as http:
        for name, params in (
            ("by computer (JSON)", {"group_by": "computer"}),
            ("by day (JSON)", {"group_by": "day"}),
            ("by computer (CSV)", {"group_by": "computer", "format": "csv"}),
        ):
            took = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                r = http.get("/v1/usage", params={"from": since, **params})
                took.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
            out[name] = took
    return out


def main(rounds: int) -> None:
    for old in data_dir().root.glob("bench-usage-*"):
        shutil.rmtree(old)  # a fresh store each run
    print("a state write's transaction (SQLite, in process):")
    print(summary("  without metering", state_writes(False)))
    print(summary("  with metering", state_writes(True)))
    results = {}
    for metering in (False, True):
        results[metering] = through_the_server(metering, rounds)
    print("through a real server (QEMU TCG guests here):")
    for metering in (False, True):
        execs, creates, _ = results[metering]
        said = "with metering (checked every 0.5 s)" if metering else "without metering"
        print(summary(f"  exec true, {said}", execs))
        print(summary(f"  create to first exec, {said}", creates))
    server = ServerProcess(data_dir(), "bench-usage-1", {"SANBOX_DISK_OVERCOMMIT": "16"})
    server.start()
    try:
        print(f"GET /v1/usage over {INTERVALS:,} intervals:")
        for name, took in usage_reads(server, results[True][2], max(5, rounds)).items():
            print(summary(f"  {name}", took))
    finally:
        server.stop()
        for old in data_dir().root.glob("bench-usage-*"):
            shutil.rmtree(old)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
