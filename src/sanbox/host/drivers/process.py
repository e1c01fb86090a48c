"""Is a VM process alive? By pid and command line (which guards against pid reuse), for every
driver whose VM is a detached process named by its run dir."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Callable
from pathlib import Path

from .driver import Liveness
from .errors import VmmError, VmNotRunningError

# the errors that mean "no such process": anything else is a failure to look
_GONE = frozenset({errno.ENOENT, errno.ESRCH})


def _read_proc(pid: int) -> tuple[bytes, str]:
    """`/proc/PID`'s command line and run state (a letter: R, S, T, Z, ...)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    return cmdline, state


def liveness(
    pid: int, run_dir: Path, read: Callable[[int], tuple[bytes, str]] = _read_proc
) -> Liveness:
    """Whether `pid` is a live VM process of this run dir (the command line guards against pid
    reuse). A process that is gone, a zombie or another program is DEAD; a look that failed for
    another reason (EMFILE, ENFILE, EAGAIN, EPERM, ...) is UNKNOWN."""
    try:
        cmdline, state = read(pid)
    except OSError as exc:
        return Liveness.DEAD if exc.errno in _GONE else Liveness.UNKNOWN
    except IndexError:  # a stat line cut short: the process is going
        return Liveness.DEAD
    if state == "Z" or str(run_dir).encode() not in cmdline:
        return Liveness.DEAD
    return Liveness.ALIVE


def pid_alive(pid: int, run_dir: Path) -> bool:
    """False only if `pid` is known not to be this run dir's live VM process (an unknown is
    alive)."""
    return liveness(pid, run_dir) is not Liveness.DEAD


def process_running(pid: int) -> bool:
    """`pid` exists and is not a zombie (its cmdline may read empty while it execs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class DetachedVm:
    """A VM that is a detached process named by its run dir (a pidfile in it, its path in the
    command line): what every driver's VM has in common."""

    def __init__(self, pid: int, run_dir: Path, isolation: str) -> None:
        self.pid = pid
        self.run_dir = run_dir
        self.isolation = isolation

    @property
    def agent_socket(self) -> Path:
        return self.run_dir / "agent.sock"

    def liveness(self) -> Liveness:
        return liveness(self.pid, self.run_dir)

    def alive(self) -> bool:
        """False only when the process is known to be gone: a failed look is not a death."""
        return self.liveness() is not Liveness.DEAD

    async def wait_exit(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.alive():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def kill(self, timeout: float = 5.0) -> None:
        """SIGTERM (a hypervisor exits at once), then SIGKILL if it is still there after
        `timeout`."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            state = self.liveness()
            if state is Liveness.DEAD:
                return
            if state is Liveness.UNKNOWN:  # never signal a pid not known to be this VM's
                raise VmmError(f"VM process {self.pid} could not be checked: not killed")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            if await self.wait_exit(wait):
                return
        raise VmNotRunningError(f"VM process {self.pid} did not die after SIGKILL")


def stray_processes(computers: Path, known: set[str], is_vm: Callable[[str], bool]) -> list[int]:
    """VM processes (`is_vm` of their command line) under `computers` whose computer is not in
    `known`: left by a crash, their folder gone or never recorded."""
    import subprocess

    root = str(computers)
    out = subprocess.run(["pgrep", "-f", root], capture_output=True, text=True, check=False)
    stray = []
    for pid in (int(p) for p in out.stdout.split()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if is_vm(cmdline) and not any(f"{root}/{cid}/" in cmdline for cid in known):
            stray.append(pid)
    return stray
