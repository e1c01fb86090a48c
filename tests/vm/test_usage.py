"""Usage, quotas and session limits with real guests and a real server process, on two booted
computers: one without limits that runs, works, pauses, resumes, outlives a `kill -9` of the
server and is then stopped and deleted; one with `lifetime=20` that stops by itself and says why.

- running seconds match the wall clock within a second, paused time has no compute;
- a CPU-bound exec raises the measured CPU seconds (the VM's cgroup), an idle spell does not;
- a request through the egress proxy is counted in its egress bytes;
- a `kill -9` of the server in the middle of a running interval loses no time and counts none
  twice: the intervals still tile the computer's life, each CloudEvent id once;
- quota refusals (running count, memory, disk) leave no record, folder or VM behind;
- the computer with no limits is still running after the longest wait here."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from sanbox import Sanbox
from sanbox.host.data.layout import DataDir
from sanbox.sdk.errors import QuotaExceededError

from ..internet import Internet
from .conftest import qemu_pids, server_env, wait_for
from .server import ServerProcess

pytestmark = pytest.mark.vm

SAMPLE = 0.5  # seconds between usage checks
PERIOD = 5.0  # a running interval is cut this often


@pytest.fixture(scope="module")
def metered(data_dir: DataDir, internet: Internet) -> Iterator[ServerProcess]:
    env = {
        **server_env(internet),
        "SANBOX_USAGE_SAMPLE_INTERVAL": str(SAMPLE),
        "SANBOX_USAGE_RUNNING_PERIOD": str(PERIOD),
    }
    srv = ServerProcess(data_dir, f"usage-{os.urandom(3).hex()}", env)
    srv.start()
    yield srv
    if srv.proc is None or srv.proc.poll() is not None:
        srv.start()
    with Sanbox(srv.url, srv.key, timeout=300) as client:
        client.orgs.set_quota("default")
        for c in client.computers.list():
            c.delete()
    srv.remove()


def used(client: Sanbox, computer_id: str, since: datetime) -> Any:
    found = client.usage.get(start=since, by="computer")
    return next(g.usage for g in found.groups if g.key == computer_id)


def cpu_after_a_check(client: Sanbox, computer_id: str, since: datetime) -> float:
    time.sleep(2 * SAMPLE)  # the meter has read the cgroup since
    cpu = used(client, computer_id, since).cpu_seconds
    assert cpu is not None, "a real VM's CPU time is measured"
    return float(cpu)


def test_usage_limits_and_a_crash_with_real_guests(metered: ServerProcess) -> None:
    since = datetime.now().astimezone()
    client = Sanbox(metered.url, metered.key, timeout=600)
    a = client.computers.create(name="usage-a", allow=["allowed.test"])
    t_a_up = time.monotonic()
    client.computers.create(name="usage-b", lifetime=20)

    # CPU: an idle spell costs little, a CPU-bound exec about its length
    before = cpu_after_a_check(client, a.id, since)
    time.sleep(3)
    idle = cpu_after_a_check(client, a.id, since) - before
    busy_from = cpu_after_a_check(client, a.id, since)
    a.exec("timeout 4 sh -c 'while :; do :; done'; true")
    busy = cpu_after_a_check(client, a.id, since) - busy_from
    assert busy > idle + 2.0, (idle, busy)

    # egress: what its proxy carried upstream (the kernel's count)
    got = a.exec("curl -sS --max-time 20 http://allowed.test/")
    assert got.stdout == "hello from allowed.test\n", got

    # paused: no compute
    t_pause = time.monotonic()
    a.pause()
    t_paused = time.monotonic()
    time.sleep(3)
    t_resume = time.monotonic()
    a.resume()
    t_resumed = time.monotonic()

    # a lifetime stops it, and says why; no limit, no stop
    wait_for(lambda: client.computers.get("usage-b").state == "stopped", "the lifetime", 60)
    stopped = client.computers.get("usage-b")
    assert "lifetime of 20s" in (stopped.last_error or "")
    assert any("lifetime" in e.message for e in stopped.events() if e.type == "computer.stopped")
    began = next(e for e in stopped.events() if e.type == "computer.stopping").created_at
    ends = stopped.record.lifetime_ends_at
    assert began is not None and ends is not None
    late = (datetime.fromisoformat(began) - datetime.fromisoformat(ends)).total_seconds()
    assert 0 <= late < 3.0, late  # the server's watchers look every 2 s

    # kill -9 in the middle of a running interval; the VM runs on meanwhile
    time.sleep(PERIOD / 2)
    metered.kill9()
    time.sleep(3)
    metered.start()
    client.close()
    client = Sanbox(metered.url, metered.key, timeout=600)
    a = client.computers.get("usage-a")
    assert a.state == "running"  # no limit: still running after the longest wait here

    # quotas: refused before anything is made
    computers = set(metered.data_dir.computer_ids())
    pids = set(qemu_pids(metered.data_dir))
    names = {c.name for c in client.computers.list()}
    for quota in ({"running": 1}, {"memory_mib": 512}, {"disk_gib": 1}):
        client.orgs.set_quota("default", **quota)
        with pytest.raises(QuotaExceededError):
            client.computers.create(name="refused")
        client.orgs.set_quota("default")
        assert {c.name for c in client.computers.list()} == names
        assert set(metered.data_dir.computer_ids()) == computers
        assert set(qemu_pids(metered.data_dir)) == pids

    t_stop = time.monotonic()
    a.stop()
    a.delete()
    client.computers.get("usage-b").delete()

    # the intervals tile its life: no gap, no overlap, each event once
    feed: list[dict[str, Any]] = []
    cursor = 0
    while page := client.usage.events(after=cursor)[0]:
        feed += page
        cursor = int(page[-1]["sequence"])
    mine = sorted(
        (e for e in feed if e["data"]["computer"] == a.id), key=lambda e: e["data"]["start"]
    )
    assert len({e["id"] for e in mine}) == len(mine)
    for prev, nxt in zip(mine, mine[1:], strict=False):
        assert nxt["data"]["start"] == prev["data"]["end"], (prev, nxt)
    assert mine[-1]["data"]["state"] == "deleting"
    states = [e["data"]["state"] for e in mine]
    assert states.count("running") > 2  # cut while running, across the crash too
    for e in mine:
        if e["data"]["state"] in ("paused", "stopped", "deleting"):
            assert e["data"]["vcpu_seconds"] == 0 and e["data"]["memory_gib_seconds"] == 0
            assert e["data"]["disk_gib_seconds"] > 0

    u = used(client, a.id, since)
    wall_running = (t_pause - t_a_up) + (t_stop - t_resumed)  # the crash's time included
    assert abs(u.running_seconds - wall_running) < 1.0, (u.running_seconds, wall_running)
    assert abs(u.paused_seconds - (t_resume - t_paused)) < 1.0, u
    assert u.vcpu_seconds == pytest.approx(u.compute_seconds, abs=0.01)  # 1 vCPU
    assert u.cpu_seconds is not None and u.cpu_seconds >= busy
    assert u.egress_bytes is not None and u.egress_bytes > len(got.stdout), u
    assert sum(e["data"]["vcpu_seconds"] for e in mine) == pytest.approx(u.vcpu_seconds, abs=0.05)
    client.close()
