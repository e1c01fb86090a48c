"""The real services supervisor (``python3 -S -m sanbox.guest.services``) as a local process, its
files under a temp root (``$SANBOX_SERVICES_ROOT``), its services real processes: what it promises
a template's services (env, cwd, restarts by policy, bounded logs, reloads, a clean stop), and that
a service cannot get around it by flooding output, ignoring SIGTERM or leaving children behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sanbox.guest.service_files import ROOT_ENV
from sanbox.host.agent import AgentClient

pytestmark = pytest.mark.component

SRC = Path(__file__).resolve().parents[2] / "src"
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def group_members(pgids: set[int]) -> list[int]:
    """Live processes in any of these process groups."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) in pgids and fields[0] not in "ZX":
                found.append(int(entry.name))
    return found


class Supervisor:
    """The supervisor process over one temp root; stopped and its services killed at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "etc" / "sanbox" / "services.json"
        self.logs = root / "var" / "log" / "sanbox" / "services"
        self.statuses = root / "run" / "sanbox" / "services"
        self.output = root / "supervisor.log"
        self.env = {**os.environ, "PYTHONPATH": str(SRC), ROOT_ENV: str(root)}
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen_pids: set[int] = set()

    def write(self, services: list[dict[str, Any]], env: dict[str, str] | None = None) -> None:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(json.dumps({"env": env or {}, "services": services}))
        tmp.replace(self.config)

    def start(self) -> None:
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-S", "-u", "-m", "sanbox.guest.services"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def status(self, name: str) -> dict[str, Any] | None:
        try:
            status: dict[str, Any] = json.loads((self.statuses / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        if isinstance(status.get("pid"), int):
            self.seen_pids.add(status["pid"])
        return status

    def running(self, name: str, *, not_pid: int | None = None, restarts: int = 0) -> int:
        """Wait until ``name`` runs (as a process other than ``not_pid``); its pid."""

        def check() -> int | None:
            s = self.status(name)
            if s and s["state"] == "running" and s["pid"] not in (None, not_pid, 0):
                return int(s["pid"]) if s["restarts"] >= restarts else None
            return None

        return wait_for(check, f"{name} running")

    def state(self, name: str, state: str) -> dict[str, Any]:
        return wait_for(lambda: (s := self.status(name)) and s["state"] == state and s, state)

    def log(self, name: str) -> str:
        try:
            return (self.logs / f"{name}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        finally:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    root = Path(tempfile.mkdtemp(prefix="sbsvc", dir="/tmp"))
    sup = Supervisor(root)
    try:
        yield sup
        sup.stop()
        output = sup.output.read_text()
        assert "Traceback" not in output, output
    finally:
        sup.stop()
        for pid in group_members(sup.seen_pids):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def sleeper(name: str, **kw: str) -> dict[str, Any]:
    return {"name": name, "command": "exec sleep 1000", "cwd": "/", **kw}


def test_a_service_runs_in_its_cwd_with_a_clean_env_and_no_stdin(supervisor: Supervisor) -> None:
    work = supervisor.root / "srv"
    work.mkdir()
    shown = f'"$GREETING|$HOME|$PATH|$(pwd)|$(readlink /proc/$$/fd/0)|${{{ROOT_ENV}:-unset}}"'
    command = f"echo {shown}; exec sleep 1000"
    supervisor.write([{"name": "web", "command": command, "cwd": str(work)}], {"GREETING": "hi"})
    supervisor.start()
    pid = supervisor.running("web")
    line = wait_for(lambda: supervisor.log("web").strip(), "the service's output")
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert line == f"hi|/root|{path}|{work}|/dev/null|unset"  # nothing of the supervisor's env
    stat = Path(f"/proc/{pid}/stat").read_text()
    pgrp, session = stat[stat.rfind(")") + 2 :].split()[2:4]
    assert int(pgrp) == int(session) == pid  # a session of its own
    status = supervisor.status("web")
    assert status is not None and status["restarts"] == 0 and status["last_exit"] is None


def test_a_killed_service_is_restarted_and_the_agent_reports_it(supervisor: Supervisor) -> None:
    supervisor.write([sleeper("web")])
    supervisor.start()
    first = supervisor.running("web")
    os.kill(first, signal.SIGKILL)
    second = supervisor.running("web", not_pid=first, restarts=1)
    assert not alive(first)
    assert "[sanbox] web exited (signal 9), restarting in 0.5s" in supervisor.log("web")

    socket_path = str(supervisor.root / "agent.sock")
    with open(supervisor.root / "agent.log", "ab") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "sanbox.guest.agent", "--unix", socket_path],
            env=supervisor.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )

    async def ask() -> list[dict[str, object]]:
        async with await AgentClient.connect(socket_path, timeout=15) as client:
            return await client.services()

    try:
        [status] = asyncio.run(ask())
    finally:
        agent.kill()
        agent.wait()
    assert status["name"] == "web" and status["state"] == "running"
    assert status["pid"] == second and status["restarts"] == 1
    assert status["last_exit"] == {"code": None, "signal": 9}
    assert isinstance(status["started_at"], float) and "proc_start" not in status


def test_services_that_should_stay_down_stay_down(supervisor: Supervisor) -> None:
    supervisor.write(
        [
            {"name": "never", "command": "exit 3", "restart": "never"},
            {"name": "done", "command": "exit 0", "restart": "on-failure"},
            {"name": "flaky", "command": "exit 1", "restart": "on-failure"},
            {"name": "nowhere", "command": "true", "cwd": "/no/such/dir", "restart": "never"},
        ]
    )
    supervisor.start()
    never = supervisor.state("never", "exited")
    assert never["last_exit"] == {"code": 3, "signal": None} and never["pid"] is None
    done = supervisor.state("done", "exited")
    assert done["last_exit"] == {"code": 0, "signal": None}
    # a failing on-failure service comes back, twice (0.5 s then 1 s later) ...
    wait_for(lambda: (s := supervisor.status("flaky")) and s["restarts"] >= 2, "flaky restarted")
    assert "[sanbox] flaky exited (code 1), restarting in 1s" in supervisor.log("flaky")
    # ... while those two were left alone all that time
    for name in ("never", "done"):
        status = supervisor.status(name)
        assert status is not None and (status["state"], status["restarts"]) == ("exited", 0)
        assert "restarting" not in supervisor.log(name)
    assert "could not start: cwd /no/such/dir" in supervisor.log("nowhere")
    assert supervisor.state("nowhere", "exited")["last_exit"] == {"code": 127, "signal": None}


def test_a_flooding_service_cannot_fill_the_disk_or_the_memory(supervisor: Supervisor) -> None:
    supervisor.write([{"name": "flood", "command": "exec yes 0123456789abcdef", "cwd": "/"}])
    supervisor.start()
    supervisor.running("flood")
    rotated = supervisor.logs / "flood.log.1"
    logs = [supervisor.logs / "flood.log", rotated]

    def size() -> int:
        total = 0
        for path in logs:
            # between the rename and the new log, there is no flood.log
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
        return total

    def rotations_seen(seen: set[int]) -> bool:
        assert size() <= 2 * 1024 * 1024  # log + log.1, each at most 1 MiB
        with contextlib.suppress(FileNotFoundError):
            seen.add(rotated.stat().st_ino)
        return len(seen) >= 3  # rotated three times: 4 MiB or more went through

    seen: set[int] = set()
    wait_for(lambda: rotations_seen(seen), "three rotations", timeout=60)
    assert supervisor.proc is not None
    rss = wait_for(lambda: vm_rss(supervisor.proc.pid if supervisor.proc else 0), "its RSS")
    assert rss < 64 * 1024  # KiB: the output went through, not into memory


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_sighup_starts_new_stops_removed_and_restarts_changed(supervisor: Supervisor) -> None:
    supervisor.write([sleeper("keep"), sleeper("change"), sleeper("gone")])
    supervisor.start()
    keep, change, gone = (supervisor.running(n) for n in ("keep", "change", "gone"))
    supervisor.write([sleeper("keep"), sleeper("change", cwd="/tmp"), sleeper("new")])
    supervisor.signal(signal.SIGHUP)
    supervisor.running("new")
    supervisor.running("change", not_pid=change)
    wait_for(lambda: not alive(gone) and supervisor.status("gone") is None, "gone stopped")
    assert supervisor.running("keep") == keep  # untouched
    assert sorted(p.stem for p in supervisor.statuses.glob("*.json")) == ["change", "keep", "new"]

    # a new env is every service's: all of them restart; a bad file leaves them as they are
    supervisor.write([sleeper("keep")], {"MODE": "two"})
    supervisor.signal(signal.SIGHUP)
    keep2 = supervisor.running("keep", not_pid=keep)
    assert Path(f"/proc/{keep2}/environ").read_bytes().split(b"\0").count(b"MODE=two") == 1
    supervisor.config.write_text("{not json")
    supervisor.signal(signal.SIGHUP)
    wait_for(lambda: "services left as they are" in supervisor.output.read_text(), "refusal")
    assert supervisor.running("keep") == keep2
    supervisor.config.unlink()  # no file: no services
    supervisor.signal(signal.SIGHUP)
    wait_for(lambda: not alive(keep2) and not list(supervisor.statuses.glob("*.json")), "none")


def test_sigterm_ends_every_child_even_those_that_ignore_it(supervisor: Supervisor) -> None:
    supervisor.write(
        [
            sleeper("plain"),
            {"name": "stubborn", "command": "trap '' TERM; sleep 1000 & wait", "cwd": "/"},
            {"name": "parent", "command": "sleep 1000 & sleep 1000 & wait", "cwd": "/"},
        ]
    )
    supervisor.start()
    leaders = {supervisor.running(n) for n in ("plain", "stubborn", "parent")}
    wait_for(lambda: len(group_members(leaders)) >= 6, "every child started")
    started = time.monotonic()
    assert supervisor.stop() == 0
    assert time.monotonic() - started < 10  # TERM, then KILL after 5 s for the stubborn one
    assert group_members(leaders) == []
    for name in ("plain", "stubborn", "parent"):
        status = supervisor.status(name)
        assert status is not None and (status["state"], status["pid"]) == ("stopped", None)


def test_a_restarted_supervisor_does_not_run_a_service_twice(supervisor: Supervisor) -> None:
    supervisor.write([sleeper("web")])
    supervisor.start()
    first = supervisor.running("web")
    assert supervisor.proc is not None
    supervisor.proc.kill()  # SIGKILL: no chance to stop its services (say, the OOM killer)
    supervisor.proc.wait()
    assert alive(first)
    supervisor.start()
    supervisor.running("web", not_pid=first)
    wait_for(lambda: not alive(first), "the orphaned service killed")
    assert len(group_members(supervisor.seen_pids)) == 1


def takes_sighup(pid: int) -> bool:
    """Whether a SIGHUP now would be taken, not kill it: blocked, or waited for in sigwait (which
    shows as unblocked while it waits)."""
    if "sigtimedwait" in Path(f"/proc/{pid}/wchan").read_text():
        return True
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def test_without_a_file_it_waits_for_one_and_a_sighup(supervisor: Supervisor) -> None:
    supervisor.start()
    assert supervisor.proc is not None
    pid = supervisor.proc.pid
    wait_for(lambda: takes_sighup(pid), "the supervisor waiting for signals")
    supervisor.signal(signal.SIGHUP)  # still no file: it goes on waiting
    wait_for(lambda: takes_sighup(pid), "the supervisor waiting again")
    supervisor.write([sleeper("late")])
    supervisor.signal(signal.SIGHUP)
    supervisor.running("late")
    assert supervisor.proc.poll() is None  # the same process through both, now supervising


def test_without_a_file_sigterm_ends_it(supervisor: Supervisor) -> None:
    supervisor.start()
    assert supervisor.proc is not None
    pid = supervisor.proc.pid
    wait_for(lambda: takes_sighup(pid), "the supervisor waiting for signals")
    assert supervisor.stop() == 0
