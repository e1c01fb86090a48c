"""The component tier runs the API, the control plane and the real store in-process, with the real
guest agent running as a local process in place of a VM (a test double for the hypervisor only:
disks, run dirs, sockets, the agent protocol and the store are all real)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sanbox.api import ServerSettings, create_app
from sanbox.guest import service_files, ssh
from sanbox.host.image import recipe_for
from sanbox.host.layout import DataDir
from sanbox.host.runtime import HostRuntime
from sanbox.host.vmm import QemuVm, VmSpec
from sanbox.host.vmm.qemu import _pid_alive

SRC = Path(__file__).parents[2] / "src"


class LocalVm(QemuVm):
    """A local agent process as a VM: its vCPUs are the process; a SIGSTOP'd process is a VM
    whose vCPUs the host stopped (as a fork's memory save does to QEMU's), `cont` is SIGCONT."""

    async def frozen(self) -> bool | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except (OSError, IndexError):
            return None

    async def continue_running(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


class LocalProcessHypervisor:
    """Boots a 'VM' that is the real agent listening on the run dir's agent socket."""

    name = "local"
    accel = "process"
    isolation = "local-process"
    memory_overhead_mib = 0
    maps_read_only = False

    async def boot(self, spec: VmSpec) -> QemuVm:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        # The agent acts on the kernel and the files of what it runs on: here that is this host,
        # whose hostname, /etc/hostname and machine-id a computer's create, claim or fork must
        # not change. Its own UTS and mount namespaces keep the hostname and /etc/hostname (a
        # file bound over it) its own; its own root takes its identity and SSH files, which also
        # keeps the agent off the kernel calls it makes only in a VM (unless a test set a root);
        # its services' files go there too.
        root = os.environ.get(ssh.ROOT_ENV) or str(spec.run_dir / "root")
        Path(root, "etc").mkdir(parents=True, exist_ok=True)
        hostname = spec.run_dir / "hostname"
        hostname.write_text(spec.hostname + "\n")
        env = dict(os.environ, PYTHONPATH=str(SRC), LOG=str(spec.console_log),
                   HOSTNAME_FILE=str(hostname), **{ssh.ROOT_ENV: root})  # fmt: skip
        env.setdefault(service_files.ROOT_ENV, root)
        # detach like QEMU's -daemonize: the shell exits, the agent is re-parented to init
        # (unshare, sh and setsid each exec the next: the pid is the agent's)
        argv = [sys.executable, "-m", "sanbox.guest.agent", "--unix", str(spec.agent_socket)]
        inner = 'mount --bind "$HOSTNAME_FILE" /etc/hostname && hostname "$(cat "$HOSTNAME_FILE")"'
        inner += ' && exec setsid "$@"'
        own = ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", inner, "sh"]
        script = 'exec "$@" </dev/null >>"$LOG" 2>&1 &\necho $!'
        out = subprocess.run(
            ["sh", "-c", script, "sh", *own, *argv], env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        pid = int(out.stdout.strip())
        _wait_exec(pid, sys.executable)
        spec.pidfile.write_text(str(pid))
        return LocalVm(pid, spec.run_dir, self.isolation)

    def attach(self, run_dir: Path) -> QemuVm | None:
        try:
            pid = int((run_dir / "vm.pid").read_text())
        except (OSError, ValueError):
            return None
        return LocalVm(pid, run_dir, self.isolation) if _pid_alive(pid, run_dir) else None


def _wait_exec(pid: int, executable: str, timeout: float = 10.0) -> None:
    """Wait until `pid` has exec'd `executable`: mid-exec, /proc/PID/cmdline reads empty and the
    runtime's liveness check would take the agent for dead (QEMU writes its own pidfile, after)."""
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


def fake_image(dd: DataDir, size: int = 1024**3) -> None:
    build_id = recipe_for("base").build_id()
    path = dd.images / "base" / build_id
    path.mkdir(parents=True)
    for name in ("vmlinuz", "initrd.img"):
        (path / name).write_bytes(b"")
    with open(path / "rootfs.raw", "wb") as f:
        f.truncate(size)
    manifest = {"template": "base", "build_id": build_id, "kernel_release": "test",
                "disk_size_gib": 1}  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(manifest))


def host_identity() -> dict[str, object]:
    """What names this host, which no local 'VM' may change."""
    named: dict[str, object] = {"hostname": os.uname().nodename}
    for path in ("/etc/hostname", "/etc/machine-id"):
        with contextlib.suppress(OSError):
            named[path] = Path(path).read_bytes()
    with contextlib.suppress(OSError):
        named["/etc/ssh"] = sorted(os.listdir("/etc/ssh"))
    return named


@pytest.fixture(autouse=True)
def host_untouched() -> Iterator[None]:
    """Every component test: the local agents of its computers left this host's name alone."""
    before = host_identity()
    yield
    assert host_identity() == before, "a local agent changed this host's identity"


@dataclass
class Server:
    client: TestClient
    key: str
    data_dir: DataDir
    settings: ServerSettings

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sbc", dir="/tmp"))  # Unix socket paths must stay short
    yield path
    kill_agents(path)
    shutil.rmtree(path, ignore_errors=True)


def kill_agents(root: Path) -> None:
    """The agents of computers a test left under `root`: a 'VM' here outlives its server, as
    QEMU does, and nothing else would end it."""
    for pidfile in root.rglob("vm.pid"):
        try:
            pid = int(pidfile.read_text())
            if str(root) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass  # gone already


def start_server(
    root: Path, database_url: str | None = None
) -> tuple[TestClient, ServerSettings, DataDir]:
    dd = DataDir(root / "data")
    settings = ServerSettings(data_dir=dd.root, client_config=root / "config.toml",
                              watch_interval=0.2, database_url=database_url)  # fmt: skip
    runtime = HostRuntime(dd, LocalProcessHypervisor(), networking=False)
    return TestClient(create_app(settings, runtime)), settings, dd


@pytest.fixture
def server(short_tmp: Path) -> Iterator[Server]:
    yield from serve(short_tmp)


def serve(short_tmp: Path, database_url: str | None = None) -> Iterator[Server]:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    client, settings, dd = start_server(short_tmp, database_url)
    with client:
        key = client.app.state.first_key  # type: ignore[attr-defined]
        yield Server(client, key, dd, settings)
        for row in client.get("/v1/computers", headers={"Authorization": f"Bearer {key}"}).json()[
            "computers"
        ]:
            client.delete(f"/v1/computers/{row['id']}", headers={"Authorization": f"Bearer {key}"})


@dataclass
class LiveServer:
    url: str
    key: str
    data_dir: DataDir


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """An ASGI app served by a real uvicorn on a free port, in a thread; yields its URL."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, port=port, log_level="error", ws="websockets-sansio")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def live_server(short_tmp: Path) -> Iterator[LiveServer]:
    """The real app served by uvicorn on a free port in a thread (for the sync SDK and the CLI)."""
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2)
    app = create_app(settings, HostRuntime(dd, LocalProcessHypervisor(), networking=False))
    with served(app) as url:
        yield LiveServer(url, app.state.first_key, dd)
