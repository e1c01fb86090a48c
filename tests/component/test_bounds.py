"""One computer must not take the server down: a hostile guest (nesting bombs, window overruns)
and a tenant's flood of output or console, against the real agent, store and API.

A hostile guest is root in its VM and can replace the agent; here it is the real agent behind a
``HostileLink`` that relays it and writes whatever bytes the test wants to the host between
frames. The link stands where the VM's socket stands: the host dials it as it dials a VM."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sanbox import Sanbox
from sanbox.api import ServerSettings, create_app
from sanbox.guest import protocol as p
from sanbox.host.agent import AgentError
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers import VmSpec
from sanbox.host.drivers.local import LocalDriver, LocalVm
from sanbox.host.drivers.local.launch import wait_exec
from sanbox.host.image import find_image
from sanbox.host.machines import console
from sanbox.host.runtime import HostRuntime, MachineSpec

from .conftest import SRC, LiveServer, fake_image, served

pytestmark = pytest.mark.component

MIB = 1024 * 1024


def memory_kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
    assert match, field
    return int(match.group(1))


def reset_peak() -> int:
    """Reset this process's peak resident memory (VmHWM) to now; returns the current RSS."""
    Path("/proc/self/clear_refs").write_text("5")
    return memory_kib("VmRSS")


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# -- a hostile guest's end of the agent socket ---------------------------------------------------


class HostileLink:
    """Listens where the host dials the agent; relays each connection to the real agent,
    frame by frame, and lets the test write bytes to the host between frames."""

    def __init__(self, listen: Path, agent: Path) -> None:
        self.agent = agent
        self.opened: list[tuple[int, p.JsonDict]] = []  # (stream id, params) of each OPEN
        self.connections = 0
        self._lock = threading.Lock()
        self._host: socket.socket | None = None
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(listen))
        self._server.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def inject(self, data: bytes) -> bool:
        """Write ``data`` to the host now; False once the host dropped the connection."""
        with self._lock:
            if self._host is None:
                return False
            try:
                self._host.sendall(data)
            except OSError:
                return False
            return True

    def _accept(self) -> None:
        while True:
            try:
                host, _ = self._server.accept()
            except OSError:
                return
            guest = socket.socket(socket.AF_UNIX)
            guest.connect(str(self.agent))
            with self._lock:
                self._host = host
                self.connections += 1
            threading.Thread(target=self._to_guest, args=(host, guest), daemon=True).start()
            threading.Thread(target=self._to_host, args=(host, guest), daemon=True).start()

    def _to_guest(self, host: socket.socket, guest: socket.socket) -> None:
        decoder = p.Decoder(lenient=True)
        while data := _recv(host):
            for frame in decoder.feed(data):
                if isinstance(frame, p.Open):
                    self.opened.append((frame.stream, frame.params))
            decoder.errors.clear()
            guest.sendall(data)
        guest.close()
        host.close()

    def _to_host(self, host: socket.socket, guest: socket.socket) -> None:
        decoder = p.Decoder(lenient=True)
        while data := _recv(guest):
            for frame in decoder.feed(data):
                sync = p.SYNC if isinstance(frame, p.HelloAck) else b""
                if not self.inject(sync + p.encode(frame)):
                    return

    def stream_of(self, cmd: str) -> int:
        """The stream id of the exec the host opened for ``cmd``."""
        return next(sid for sid, params in self.opened if params.get("cmd") == cmd)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(256 * 1024)
    except OSError:
        return b""


class HostileHypervisor(LocalDriver):
    """The real agent as the 'VM' (as in conftest), reached only through a ``HostileLink``."""

    def __init__(self) -> None:
        self.links: dict[str, HostileLink] = {}

    async def boot(self, spec: VmSpec) -> LocalVm:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        real = spec.run_dir / "guest.sock"
        argv = [sys.executable, "-m", "sanbox.guest.agent", "--unix", str(real)]
        script = 'exec setsid "$@" </dev/null >>"$LOG" 2>&1 &\necho $!'
        out = subprocess.run(
            ["sh", "-c", script, "sh", *argv],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(SRC), "LOG": str(spec.console_log)},
        )
        pid = int(out.stdout.strip())
        wait_exec(pid, sys.executable)
        await asyncio.to_thread(wait_for, real.exists)
        self.links[spec.name] = HostileLink(spec.agent_socket, real)
        spec.pidfile.write_text(str(pid))
        return LocalVm(pid, spec.run_dir, self.isolation)


def nesting_bomb(stream: int, depth: int = 10_000) -> bytes:
    body = b'{"type":"exit","x":' + b"[" * depth + b"]" * depth + b"}"
    return p.HEADER.pack(p.MAGIC, p.FrameType.MSG, 0, stream, len(body)) + body


@dataclass
class HostileServer:
    url: str
    key: str
    hypervisor: HostileHypervisor

    def post(self, path: str, body: dict[str, object], timeout: float = 60) -> httpx.Response:
        return httpx.post(
            self.url + path,
            json=body,
            timeout=timeout,
            headers={"Authorization": f"Bearer {self.key}"},
        )


@pytest.fixture
def hostile_server(short_tmp: Path) -> Iterator[HostileServer]:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    hv = HostileHypervisor()
    settings = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2)
    app = create_app(settings, HostRuntime(dd, hv, networking=False))
    with served(app) as url:
        yield HostileServer(url, app.state.first_key, hv)
        remove_computers(url, app.state.first_key)
    for link in hv.links.values():
        link.close()


def remove_computers(url: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    for row in httpx.get(f"{url}/v1/computers", headers=headers).json()["computers"]:
        httpx.delete(f"{url}/v1/computers/{row['id']}", headers=headers, timeout=60)


@pytest.fixture
def live(live_server: LiveServer) -> Iterator[LiveServer]:
    """The live server, its computers (agent processes) removed at the end."""
    yield live_server
    remove_computers(live_server.url, live_server.key)


def test_a_nesting_bomb_drops_the_connection_and_the_next_call_dials_again(
    hostile_server: HostileServer,
) -> None:
    server = hostile_server
    assert server.post("/v1/computers", {"name": "bomb"}).status_code == 201
    link = server.hypervisor.links[next(iter(server.hypervisor.links))]
    with concurrent.futures.ThreadPoolExecutor() as pool:
        pending = pool.submit(server.post, "/v1/computers/bomb/exec", {"cmd": "sleep 30"})
        wait_for(lambda: any(params.get("cmd") == "sleep 30" for _, params in link.opened))
        started = time.monotonic()
        assert link.inject(nesting_bomb(link.stream_of("sleep 30")))
        r = pending.result(timeout=20)
    assert time.monotonic() - started < 10  # failed at once, not after the command's 30 s
    assert (r.status_code, r.json()["error"]["code"]) == (503, "agent_unavailable")
    assert "nested deeper" in r.json()["error"]["message"]
    r = server.post("/v1/computers/bomb/exec", {"cmd": "echo alive"})
    assert (r.status_code, r.json()["stdout"]) == (200, "alive\n")
    assert link.connections == 2  # dialled again


def test_a_guest_overrunning_its_window_is_dropped_not_buffered(short_tmp: Path) -> None:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    hv = HostileHypervisor()
    runtime = HostRuntime(dd, hv, networking=False)

    async def scenario() -> None:
        machine, _ = await runtime.create(MachineSpec("cmp_flood"), find_image(dd, "base"))
        link = hv.links["cmp_flood"]
        try:
            client = await machine.client()
            idle = await client.exec_stream("sleep 30")  # output nobody reads yet
            pending = asyncio.ensure_future(client.exec(["sleep", "30"]))
            await asyncio.to_thread(
                wait_for, lambda: any(o.get("argv") == ["sleep", "30"] for _, o in link.opened)
            )
            frame = p.encode(p.Data(idle._channel.id, p.STDOUT, b"\x00" * p.CHUNK))
            baseline = reset_peak()
            sent = 0

            def flood() -> None:  # 256 MiB, or until the host hangs up
                nonlocal sent
                while sent < 256 * MIB and link.inject(frame):
                    sent += p.CHUNK

            await asyncio.to_thread(flood)
            with pytest.raises(AgentError):
                await asyncio.wait_for(pending, 10)
            assert client.closed
            assert sent < 16 * MIB  # the host hung up soon after the window was spent
            assert memory_kib("VmHWM") - baseline < 32 * 1024
            again = await machine.client()  # a closed client is never handed out: dialled again
            assert again is not client and not again.closed
            assert (await again.exec(["echo", "ok"])).stdout == b"ok\n"
        finally:
            await runtime.destroy("cmp_flood")
            link.close()

    asyncio.run(scenario())


# -- a tenant's floods ----------------------------------------------------------------------------


def test_300_mib_of_exec_output_leaves_server_memory_bounded(live: LiveServer) -> None:
    headers = {"Authorization": f"Bearer {live.key}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=120) as http:
        assert http.post("/v1/computers", json={"name": "flood"}).status_code == 201
        assert http.post("/v1/computers/flood/exec", json={"cmd": "true"}).status_code == 200
        baseline = reset_peak()
        head, tail, size = b"", b"", 0
        # NUL bytes: the worst case, each is 6 bytes of JSON ("\u0000")
        body = {"cmd": "head -c 300M /dev/zero; echo done >&2"}
        with http.stream("POST", "/v1/computers/flood/exec", json=body) as r:
            assert r.status_code == 200
            for chunk in r.iter_raw():  # this test holds no more than the head of the answer
                head = head or chunk[:200]
                size += len(chunk)
                tail = (tail + chunk)[-200:]
        grown = memory_kib("VmHWM") - baseline
    assert b'"stdout_truncated":true' in head and b'"stderr_truncated":false' in head
    assert tail.endswith(b'","stderr":"done\\n"}')
    assert 6 * 10 * MIB < size < 6 * 10 * MIB + 1000  # the first 10 MiB, escaped
    assert grown < 100 * 1024, f"server memory grew by {grown // 1024} MiB"


def test_the_output_cap_per_request_through_the_sdk(live: LiveServer) -> None:
    with Sanbox(live.url, live.key) as client:
        c = client.computers.create(name="capped")
        r = c.exec("yes | head -c 5000000; printf abc >&2", max_output_bytes=1000)
        assert (r.stdout, r.stdout_truncated) == ("y\n" * 500, True)
        assert (r.stderr, r.stderr_truncated) == ("abc", False)
        r = c.exec("printf 0123456789", max_output_bytes=10)
        assert (r.stdout, r.stdout_truncated) == ("0123456789", False)
        r = c.exec("printf 0123456789", max_output_bytes=10**12)  # capped by the server's limit
        assert (r.stdout, r.stdout_truncated) == ("0123456789", False)


def test_request_bodies_over_the_limit_are_refused(live: LiveServer, short_tmp: Path) -> None:
    headers = {"Authorization": f"Bearer {live.key}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=60) as http:
        assert http.post("/v1/computers", json={"name": "bodies"}).status_code == 201
        big = {"cmd": "true", "stdin": "x" * (2 * MIB)}
        r = http.post("/v1/computers/bodies/exec", json=big)
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large")

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"cmd": "true", "stdin": "'
            for _ in range(64):
                yield b"x" * 65536
            yield b'"}'

        r = http.post(
            "/v1/computers/bodies/exec",
            content=chunked(),
            headers={"Content-Type": "application/json"},
        )
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large")
        # an upload is not a JSON body: it streams to the guest, whatever its size
        r = http.put(
            "/v1/computers/bodies/files",
            params={"path": f"{short_tmp}/upload"},
            content=b"u" * (3 * MIB),
        )
        assert r.status_code == 200 and r.json()["size"] == 3 * MIB


def test_a_console_flood_leaves_the_log_under_its_cap(live: LiveServer) -> None:
    headers = {"Authorization": f"Bearer {live.key}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=60) as http:
        created = http.post("/v1/computers", json={"name": "noisy"})
        log = live.data_dir.computer(created.json()["id"]).console_log
        # what QEMU does with the guest's serial console: appends to the log (O_APPEND)
        flood = f"for i in $(seq 10); do head -c 4M /dev/urandom | base64 >> {log}; done"
        r = http.post("/v1/computers/noisy/exec", json={"cmd": flood, "timeout": 120})
        assert r.status_code == 200 and r.json()["exit_code"] == 0
        older = console.rotated(log)

        def size(path: Path) -> int:
            return path.stat().st_size if path.exists() else 0

        # the last line goes in once the flood is rotated away: a line appended during a
        # rotation's copy-truncate may be lost (the documented cost of a log QEMU writes itself)
        wait_for(lambda: older.exists() and size(log) + size(older) <= console.CAP)
        r = http.post("/v1/computers/noisy/exec", json={"cmd": f"echo THE-END >> {log}"})
        wait_for(lambda: older.exists() and size(log) + size(older) <= console.CAP)
        assert size(older) == console.ROTATE_AT
        lines = http.get("/v1/computers/noisy/console", params={"lines": 5}).json()["lines"]
        assert lines[-1] == "THE-END"
