"""The control plane's singleton jobs across two real `sanbox server` processes over one
PostgreSQL database: one node runs each job; `kill -9` of that node moves every job it ran
(the reconciler first of all) to the other within seconds, and `GET /v1/fleet/jobs` through
either node says who runs what."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path

import httpx
import pytest

from sanbox.control.jobs import IDLE, NAMES, RECONCILER, Jobs
from sanbox.store import Database
from tests.conftest import free_port

from .conftest import fresh_schema, wait_for

pytestmark = pytest.mark.fleet
BIN = Path(sys.executable).parent / "sanbox"
ALWAYS = {"reconciler", "idle", "deadlines", "pools", "usage"}  # `hosts` waits for a host


class Node:
    def __init__(self, root: Path, db_url: str) -> None:
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True)
        env = {
            **os.environ,
            "SANBOX_CONFIG": str(root / "config.toml"),
            "SANBOX_DATABASE_URL": db_url,
        }
        self.log = root / "server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(BIN),
                    "server",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(root),
                    "--log-level",
                    "warning",
                ],
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_for(self._up, timeout=60)

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-2000:]
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def jobs(self, key: str) -> dict[str, object]:
        r = httpx.get(
            f"{self.url}/v1/fleet/jobs", headers={"Authorization": f"Bearer {key}"}, timeout=5
        )
        r.raise_for_status()
        body: dict[str, object] = r.json()
        return body

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def db_url() -> Iterator[str]:
    yield from fresh_schema()


def _key(config: Path) -> str:
    for line in config.read_text().splitlines():
        if line.startswith("api_key"):
            return line.split('"')[1]
    raise AssertionError("no api_key in the first node's client config")


def _holders(node: Node, key: str) -> dict[str, str | None]:
    jobs = node.jobs(key)["jobs"]
    assert isinstance(jobs, list)
    return {str(j["name"]): j["node"] for j in jobs}


def test_killing_the_node_that_runs_the_jobs_moves_them_to_the_other(
    db_url: str, tmp_path: Path
) -> None:
    a = Node(tmp_path / "a", db_url)
    nodes = [a]
    try:
        key = _key(a.root / "config.toml")
        node_a = str(a.jobs(key)["node"])
        wait_for(lambda: all(_holders(a, key)[j] == node_a for j in ALWAYS), timeout=20)
        b = Node(tmp_path / "b", db_url)
        nodes.append(b)
        node_b = str(b.jobs(key)["node"])
        assert node_b != node_a
        seen = _holders(b, key)
        assert {j: seen[j] for j in ALWAYS} == dict.fromkeys(ALWAYS, node_a), seen

        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        killed = time.monotonic()
        wait_for(lambda: _holders(b, key)["reconciler"] == node_b, timeout=15)
        moved = time.monotonic() - killed
        wait_for(lambda: all(_holders(b, key)[j] == node_b for j in ALWAYS), timeout=15)
        print(f"the reconciler moved to the other node {moved:.2f} s after the kill")
        assert moved < 5, f"the reconciler moved after {moved:.1f} s"
        assert b.proc.poll() is None
    finally:
        for node in nodes:
            node.end()


def test_one_node_holds_each_job_and_anyone_can_say_which(pg_db: Database) -> None:
    a, b = Jobs(pg_db, "node-a"), Jobs(pg_db, "node-b")
    try:
        assert _run(a.holds(RECONCILER)) and not _run(b.holds(RECONCILER))
        assert _run(b.holds(IDLE)) and not _run(a.holds(IDLE))  # each job is its own
        assert a.held() == [RECONCILER] and b.held() == [IDLE]
        seen = b.holders()
        assert seen[RECONCILER] == "node-a" and seen[IDLE] == "node-b"
        assert {seen[n] for n in NAMES if n not in (RECONCILER, IDLE)} == {None}
        a.close()  # a node that ends lets its jobs go
        assert _run(b.holds(RECONCILER)) and b.holders()[RECONCILER] == "node-b"
    finally:
        a.close()
        b.close()


def test_on_sqlite_the_one_node_runs_every_job(sqlite_db: Database) -> None:
    jobs = Jobs(sqlite_db, "only")
    assert all(_run(jobs.holds(n)) for n in NAMES)
    assert jobs.holders() == dict.fromkeys(NAMES, "only")


def _run(coro: Coroutine[object, object, bool]) -> bool:
    return asyncio.run(coro)
