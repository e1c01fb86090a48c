"""Placement decision time with 100 registered hosts: `Placer.place` (read the region's hosts,
score a best-of-3 sample, reserve on the best, in one transaction) on PostgreSQL and, for
comparison, SQLite; and the pure choice alone (filter and score 100 hosts). The hosts carry
random allocations; each placement is released after it (not timed), so every decision sees
the same fleet. Medians and p90s.
Usage: python benchmarks/fleet.py [ROUNDS]   (default 300; PostgreSQL from SANBOX_TEST_PG_URL,
skipped without it: `bash scripts/postgres` prints one)"""

from __future__ import annotations

import os
import random
import secrets
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from _common import summary
from sqlalchemy import text, update

from sanbox.fleet.hosts import Capacity, Hosts, HostSpec
from sanbox.fleet.placement import HostLoad, Placer, Policy, Request, choose
from sanbox.store import Database
from sanbox.store.db import sqlite_url
from sanbox.store.fleet_models import HostRow

HOSTS = 100
GIB = 1 << 30
REQUEST = Request("eu-1", vcpus=2, memory_mib=2048, disk_bytes=10 * GIB)


def fleet(db: Database, rng: random.Random) -> None:
    hosts = Hosts(db)
    for i in range(HOSTS):
        cap = Capacity(vcpus=32, memory_mib=128 * 1024, disk_bytes=2000 * GIB)
        lease = hosts.register(HostSpec(f"h{i:03}", "eu-1", f"https://h{i:03}:7443", cap, "qemu"))
        with db.engine.begin() as conn:
            conn.execute(
                update(HostRow)
                .where(HostRow.id == lease.host_id)
                .values(
                    alloc_vcpus=rng.randrange(0, 100),
                    alloc_memory_mib=rng.randrange(0, 120 * 1024),
                    alloc_disk_bytes=rng.randrange(0, 1500) * GIB,
                )
            )


def decisions(db: Database, rounds: int) -> list[float]:
    rng = random.Random(1)
    fleet(db, rng)
    placer, took = Placer(db, rng=rng), []
    for _ in range(rounds):
        t0 = time.perf_counter()
        placement = placer.place(REQUEST)
        took.append(time.perf_counter() - t0)
        placer.release(placement)
    return took


def pure(rounds: int) -> list[float]:
    rng = random.Random(2)
    loads = [
        HostLoad(
            id=f"hst_{i}",
            name=f"h{i}",
            region="eu-1",
            state="up",
            labels={},
            hypervisor="qemu",
            accel="kvm",
            layers=[],
            vcpus=32,
            memory_mib=128 * 1024,
            disk_bytes=2000 * GIB,
            alloc_vcpus=rng.randrange(100),
            alloc_memory_mib=rng.randrange(120 * 1024),
            alloc_disk_bytes=rng.randrange(1500) * GIB,
        )
        for i in range(HOSTS)
    ]
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        choose(loads, REQUEST, Policy(), rng)
        took.append(time.perf_counter() - t0)
    return took


def on_postgresql(url: str, rounds: int) -> list[float]:
    schema = f"bench_{secrets.token_hex(4)}"
    admin = Database(url)
    with admin.engine.begin() as conn:
        conn.execute(text(f"create schema {schema}"))
    db = Database(f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}")
    try:
        db.migrate()
        return decisions(db, rounds)
    finally:
        db.close()
        with admin.engine.begin() as conn:
            conn.execute(text(f"drop schema {schema} cascade"))
        admin.close()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"placement with {HOSTS} registered hosts, best of {Policy().k}")
    print(summary("choose() alone (filter, sample, score)", pure(rounds)))
    url = os.environ.get("SANBOX_TEST_PG_URL")
    if url:
        print(summary("place() on PostgreSQL (one transaction)", on_postgresql(url, rounds)))
    else:
        print("place() on PostgreSQL: skipped (set SANBOX_TEST_PG_URL)")
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(sqlite_url(Path(tmp) / "fleet.db"))
        db.migrate()
        print(summary("place() on SQLite (one transaction)", decisions(db, rounds)))
        db.close()


if __name__ == "__main__":
    main()
