"""A host agent killed with SIGKILL while its VMs run (a real process of its own, on the local
driver): its computers' calls answer `host_unreachable` at once, the computers become `unknown`
once the host is lost, and when the agent starts again they are back, the same VM processes
with the same files. At no moment do two processes run one computer id."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sanbox import Sanbox
from sanbox.fleet.link.link import SILENT_AFTER
from sanbox.fleet.link.pki import FleetCAs, Identity
from sanbox.host.data.layout import DataDir

from .conftest import LiveServer, fake_image
from .test_fleet_routing import _refused
from .test_host_link import (
    _free_port,
    _hosts,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.component

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=4.0)


def _joined(live: LiveServer, short_tmp: Path) -> tuple[Path, int, Identity]:
    """Host h1 joined to the fleet (its data dir with the image, its port), and the control
    plane's identity to reach it with."""
    host_dir, port = short_tmp / "h1", _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    return host_dir, port, FleetCAs(live.data_dir.root / "fleet").control_identity()


def _started(
    live: LiveServer, host_dir: Path, port: int, control: Identity
) -> subprocess.Popen[bytes]:
    """h1's host agent, answering, its builds reported."""
    agent = _agent(host_dir, port)
    try:
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up with its builds", lambda: bool(_hosts(live)[0].layers))
    except BaseException:
        agent.kill()
        agent.wait(10)
        raise
    return agent


def _agent(host_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    argv = [sys.executable, "-m", "tests.component.fleet_host_agent", str(host_dir), str(port)]
    return subprocess.Popen(argv, env=env, cwd=ROOT)


def _vm_processes(ids: set[str]) -> Counter[str]:
    """How many live processes name each computer id on their command line (zombies aside)."""
    seen: Counter[str] = Counter()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        for computer_id in ids:
            if computer_id.encode() in cmdline:
                seen[computer_id] += 1
    return seen


class _Watch:
    """Samples, until stopped, the most processes seen at once for each computer id."""

    def __init__(self, ids: set[str]) -> None:
        self.ids, self.most = ids, Counter[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for computer_id, n in _vm_processes(self.ids).items():
                self.most[computer_id] = max(self.most[computer_id], n)

    def stop(self) -> Counter[str]:
        self._stop.set()
        self._thread.join(5)
        return self.most


def test_a_host_agent_killed_with_its_vms_running_comes_back_without_a_second_copy(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    host_dir, port, control = _joined(live, short_tmp)
    agent = _started(live, host_dir, port, control)
    try:
        with Sanbox(live.url, live.key, timeout=60) as client:
            made = [client.computers.create(name=f"c{i}", idle_timeout=0) for i in range(2)]
            for c in made:  # the stand-in's guests share the host's /tmp
                c.files.write(f"/tmp/mark-{c.id}.txt", c.id.encode())
            ids = {c.id for c in made}
            pids = {c.id: c.exec("echo $PPID").stdout for c in made}
            watch = _Watch(ids)

            agent.send_signal(signal.SIGKILL)
            agent.wait(10)
            assert all(_vm_processes(ids)[i] == 1 for i in ids), "its VMs run on"
            started = time.monotonic()
            refused = _refused(live, made[0].id)  # its connection to the guest is gone too
            assert time.monotonic() - started < 3, "a call waited on a dead host agent"
            assert refused is not None and refused.status_code == 503, refused
            assert refused.json()["error"]["code"] == "host_unreachable", refused.text
            _until("unknown", lambda: all(c.refresh().state == "unknown" for c in made), 30)
            assert all("h1" in (c.unknown_reason or "") for c in made)

            agent = _agent(host_dir, port)  # the same host, a new process: a new epoch
            _wait_until_up(f"https://127.0.0.1:{port}", control)
            _until("back", lambda: all(c.refresh().state == "running" for c in made), 30)
            _until("exec again", lambda: _refused(live, made[0].id) is None, timeout=30)
            for c in made:
                assert c.files.read(f"/tmp/mark-{c.id}.txt") == c.id.encode()
                assert c.exec("echo $PPID").stdout == pids[c.id], "its VM was started again"
            most = watch.stop()
            assert all(most[i] == 1 for i in ids), f"two processes ran one computer: {most}"
            for c in made:
                c.exec(f"rm /tmp/mark-{c.id}.txt")
                c.delete()
            assert not _vm_processes(ids)
    finally:
        agent.kill()
        agent.wait(10)


@pytest.fixture
def patient_fleet(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=120.0)


def test_a_call_to_a_frozen_host_agent_fails_within_seconds_and_the_host_comes_back(
    patient_fleet: LiveServer, short_tmp: Path
) -> None:
    """A host agent stopped with SIGSTOP accepts connections (the kernel's) but answers nothing:
    a call already sent to it fails with `host_unreachable` once its reports have been silent for
    `SILENT_AFTER` (or, if the call needed a new connection, once its TLS handshake has waited
    `CONNECT_TIMEOUT`), not after the link's 300 s, and says which; once it runs again, so do its
    calls."""
    live = patient_fleet
    host_dir, port, control = _joined(live, short_tmp)
    agent = _started(live, host_dir, port, control)
    try:
        with Sanbox(live.url, live.key, timeout=60) as client:
            made = client.computers.create(name="frozen", idle_timeout=0)
            console = f"{live.url}/v1/computers/{made.id}/console"
            auth = {"Authorization": f"Bearer {live.key}"}
            assert httpx.get(console, headers=auth, timeout=30).status_code == 200

            agent.send_signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                r = httpx.get(console, headers=auth, timeout=120)
                waited = time.monotonic() - started
            finally:
                agent.send_signal(signal.SIGCONT)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "host_unreachable", r.text
            why = r.json()["error"]["message"]  # a new connection's handshake hangs as well
            assert "stopped answering" in why or "no connection within" in why, r.text
            assert waited < SILENT_AFTER + 6, f"the call waited {waited:.1f} s"

            _until("h1 answers", lambda: httpx.get(console, headers=auth).status_code == 200)
            _until("running again", lambda: made.refresh().state == "running", 30)
            assert made.exec("echo back").stdout == "back\n"
            made.delete()
    finally:
        agent.kill()
        agent.wait(10)


def test_a_snapshot_or_delete_refused_while_its_host_is_down_keeps_nothing_and_changes_nothing(
    patient_fleet: LiveServer, short_tmp: Path
) -> None:
    """Refused with `host_unreachable` before anything is recorded: no hidden `creating`
    snapshot keeps its name or counts against the quota, and the computer is not left
    `deleting` with its VM running on the host."""
    live = patient_fleet
    host_dir, port, control = _joined(live, short_tmp)
    agent = _started(live, host_dir, port, control)
    auth = {"Authorization": f"Bearer {live.key}"}
    try:
        with Sanbox(live.url, live.key, timeout=60) as client:
            made = client.computers.create(name="kept", idle_timeout=0)
            agent.send_signal(signal.SIGKILL)
            agent.wait(10)

            def down() -> bool:
                r = _refused(live, made.id)
                return r is not None and r.json()["error"]["code"] == "host_unreachable"

            _until("its host known down", down)
            url = f"{live.url}/v1/computers/{made.id}"
            for method, path, body in (
                ("POST", "/snapshots", {"name": "keep"}),
                ("DELETE", "", None),
            ):
                r = httpx.request(method, url + path, json=body, headers=auth, timeout=30)
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "host_unreachable", r.text
            assert made.refresh().state == "running"

            agent = _agent(host_dir, port)
            _wait_until_up(f"https://127.0.0.1:{port}", control)
            _until("exec again", lambda: _refused(live, made.id) is None, timeout=30)
            made.stop()  # the stand-in's VM has no monitor: a disk snapshot of it at rest
            snap = made.snapshot(name="keep")  # the name is free: nothing was kept of the first
            assert [s.name for s in client.snapshots.list()] == ["keep"]
            client.snapshots.delete(snap.id)
            made.delete()
            assert not (host_dir / "computers" / made.id).exists()
    finally:
        agent.kill()
        agent.wait(10)
