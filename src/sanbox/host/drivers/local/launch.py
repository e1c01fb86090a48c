"""A 'VM' that is the real guest agent listening on the run dir's agent socket, detached like a
hypervisor (re-parented to init), in UTS and mount namespaces of its own so that a computer's
new identity (hostname, /etc/hostname, machine-id, SSH keys) never touches this host. Its vCPUs
are the process: the host stopping them is a SIGSTOP (`frozen`), `continue_running` a SIGCONT.
It cannot save or load device state nor switch disks: those verbs fail as a hypervisor's would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from ....guest import service_files, ssh
from ..driver import Capabilities, VmSpec
from ..errors import VmmError
from ..process import DetachedVm, pid_alive

AGENT_MODULE = "sanbox.guest.agent"


class LocalVm(DetachedVm):
    async def frozen(self) -> bool | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except (OSError, IndexError):
            return None

    async def continue_running(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    async def pause(self) -> None:
        raise VmmError("a local process's vCPUs cannot be stopped by the host")

    async def disk_error(self) -> str | None:
        return None  # its disk is a file nobody opens

    async def save_state(self, vmstate: Path) -> bool:
        raise VmmError("a local process has no device state to save")

    async def save_state_in_place(
        self, vmstate: Path, memory_fd: int, into_fd: int | None = None
    ) -> list[tuple[int, int]] | None:
        return None  # a local process has no saved memory

    async def save_state_live(self, vmstate: Path, at_stop: Callable[[], Awaitable[None]]) -> float:
        raise VmmError("a local process has no device state to save")

    def split_saved_state(
        self, saved: Path, vmstate: Path, memory: Path, memory_bytes: int
    ) -> None:
        raise VmmError("a local process has no saved state")

    async def load_state(self, vmstate: Path) -> None:
        raise VmmError("a local process cannot load a saved state")

    async def quit(self) -> None:
        await self.kill()

    async def switch_disk(self, overlay: Path) -> None:
        raise VmmError("a local process has no disk to switch")

    async def stream_disk(self, base: Path) -> None:
        raise VmmError("a local process has no disk to stream")

    async def grow_disk(self, size_bytes: int) -> None:
        return None  # nothing in it reads the disk file


class LocalDriver:
    """Boots a 'VM' that is the real agent (the source tree's, run by this Python)."""

    name = "local"
    accel = "process"
    run_files: tuple[str, ...] = ("agent.sock", "vm.pid")
    isolation = "local-process"
    build = "local"

    def __init__(self, source: Path | None = None) -> None:
        self.source = source or Path(__file__).parents[4]  # the folder holding `sanbox`

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            disk_formats=("qcow2", "raw"),
            live_disk_switch=False,
            live_memory_save=False,
            maps_read_only=False,
            snapshot_format="none",
            confinement="none",
            seccomp=None,
            disk_errors="passed to the guest",
            disk_rate=None,  # a local process writes the host's files directly
            memory_overhead_mib=0,
            hypervisor_memory_mib=0,  # no hypervisor: the agent is the host's own process
            agent_channel="unix",
        )

    tools: dict[str, str] = {"unshare": "util-linux"}

    def is_vm_process(self, cmdline: str) -> bool:
        return AGENT_MODULE in cmdline

    async def boot(self, spec: VmSpec) -> LocalVm:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        # The agent acts on the kernel and the files of what it runs on: here that is this host,
        # whose hostname, /etc/hostname and machine-id a computer's create, claim or fork must
        # not change. Its own UTS and mount namespaces keep the hostname and /etc/hostname (a
        # file bound over it) its own; its own root takes its identity and SSH files, which also
        # keeps the agent off the kernel calls it makes only in a VM (unless a caller set a
        # root); its services' files go there too.
        root = os.environ.get(ssh.ROOT_ENV) or str(spec.run_dir / "root")
        Path(root, "etc").mkdir(parents=True, exist_ok=True)
        hostname = spec.run_dir / "hostname"
        hostname.write_text(spec.hostname + "\n")
        env = dict(
            os.environ,
            PYTHONPATH=str(self.source),
            LOG=str(spec.console_log),
            HOSTNAME_FILE=str(hostname),
            **{ssh.ROOT_ENV: root},
        )
        env.setdefault(service_files.ROOT_ENV, root)
        # detach like a hypervisor: the shell exits, the agent is re-parented to init
        # (unshare, sh and setsid each exec the next: the pid is the agent's)
        argv = [sys.executable, "-m", AGENT_MODULE, "--unix", str(spec.agent_socket)]
        inner = 'mount --bind "$HOSTNAME_FILE" /etc/hostname && hostname "$(cat "$HOSTNAME_FILE")"'
        inner += ' && exec setsid "$@"'
        own = ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", inner, "sh"]
        script = 'exec "$@" </dev/null >>"$LOG" 2>&1 &\necho $!'
        out = subprocess.run(
            ["sh", "-c", script, "sh", *own, *argv],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        pid = int(out.stdout.strip())
        wait_exec(pid, sys.executable)
        spec.pidfile.write_text(str(pid))
        return LocalVm(pid, spec.run_dir, self.isolation)

    def attach(self, run_dir: Path) -> LocalVm | None:
        try:
            pid = int((run_dir / "vm.pid").read_text())
        except (OSError, ValueError):
            return None
        return LocalVm(pid, run_dir, self.isolation) if pid_alive(pid, run_dir) else None


def wait_exec(pid: int, executable: str, timeout: float = 10.0) -> None:
    """Wait until `pid` has exec'd `executable`: mid-exec, /proc/PID/cmdline reads empty and the
    liveness check would take the agent for dead (a hypervisor writes its own pidfile, after)."""
    want = os.path.realpath(executable)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            exe = os.path.realpath(f"/proc/{pid}/exe")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if exe == want and cmdline:  # exe switches before the new argv is set up
                return
        except OSError:
            return  # gone already: the runtime reports the exit with the console's words
        time.sleep(0.01)
