"""Pause, resume and idle suspension through the real server, the CLI and the SDK."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sanbox import Sanbox

from .conftest import cli
from .server import ServerProcess

pytestmark = pytest.mark.vm


def vm_processes(server: ServerProcess, computer_id: str) -> list[str]:
    pattern = f"{server.data_dir.computers}/{computer_id}/"
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return out.stdout.split()


def test_pause_and_resume_say_what_they_kept(server: ServerProcess, client: Sanbox) -> None:
    c = client.computers.create(name="rest-cli", idle_timeout=0)
    c.exec("nohup sleep 10000 >/dev/null 2>&1 &")
    r = cli(server, "pause", "rest-cli")
    assert r.returncode == 0 and "memory and processes saved" in r.stdout, r.stdout + r.stderr
    assert client.computers.get("rest-cli").state == "paused"
    assert vm_processes(server, c.id) == []  # no process: no CPU, no guest memory
    assert not list(Path("/dev/shm").glob(f"sanbox-*-{c.id}.ram"))
    r = cli(server, "exec", "rest-cli", "--", "true")
    assert r.returncode == 1 and "computer_not_running" in r.stderr and "resume" in r.stderr
    r = cli(server, "resume", "rest-cli")
    assert r.returncode == 0 and "memory: restored" in r.stdout, r.stdout + r.stderr
    assert c.refresh().memory == "restored"
    assert c.exec("pgrep -x sleep").exit_code == 0
    r = cli(server, "stop", "rest-cli")
    assert "memory dropped on purpose" in r.stdout
    r = cli(server, "start", "rest-cli")
    assert "memory: lost (it was stopped" in r.stdout
    c.delete()


def test_idle_computer_is_suspended_and_woken_by_exec(
    server: ServerProcess, client: Sanbox
) -> None:
    c = client.computers.create(name="sleepy", idle_timeout=3)
    c.exec("echo remembered > /tmp/mem")
    deadline = time.monotonic() + 60
    while c.refresh().state != "suspended":
        assert time.monotonic() < deadline, f"never suspended (state {c.state})"
        time.sleep(0.5)
    assert vm_processes(server, c.id) == []
    r = cli(server, "exec", "sleepy", "--", "cat", "/tmp/mem")
    assert r.returncode == 0 and r.stdout == "remembered\n", r.stderr
    c.refresh()
    assert c.state == "running" and c.memory == "restored"
    woken = [e for e in c.events() if e.type == "computer.woken"]
    assert woken and woken[-1].data["seconds"] > 0 and "woken in" in woken[-1].message
    c.update(idle_timeout=0)
    c.delete()


def test_suspended_computer_survives_a_server_kill(server: ServerProcess, client: Sanbox) -> None:
    c = client.computers.create(name="sturdy", idle_timeout=0)
    c.exec("nohup sh -c 'echo $$ > /tmp/loop.pid; while :; do sleep 1; done' >/dev/null 2>&1 &")
    deadline = time.monotonic() + 30
    while not (pid := c.exec("cat /tmp/loop.pid 2>/dev/null").stdout.strip()):
        assert time.monotonic() < deadline, "the loop never started"
        time.sleep(0.3)
    c.update(idle_timeout=2)
    deadline = time.monotonic() + 60
    while c.refresh().state != "suspended":
        assert time.monotonic() < deadline, f"never suspended (state {c.state})"
        time.sleep(0.5)
    server.kill9()
    server.start()
    with Sanbox(server.url, server.key, timeout=600) as fresh:
        again = fresh.computers.get("sturdy")
        assert again.state == "suspended"
        assert again.exec(["kill", "-0", pid]).exit_code == 0  # woken by the command
        assert again.refresh().memory == "restored"
        assert again.exec("cat /tmp/loop.pid").stdout.strip() == pid
        again.update(idle_timeout=0)
        again.delete()
