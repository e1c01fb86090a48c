"""The real guest agent as a local subprocess (``--unix``), driven by the real host client."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sanbox.guest import protocol as p
from sanbox.host.agent import (
    AgentClient,
    AgentTimeoutError,
    AgentUnavailableError,
    CommandNotFoundError,
    ConnectionRefusedInGuestError,
    ExecError,
    Exit,
    FileNotFoundInGuestError,
    InvalidPathError,
    RemoteError,
    Stderr,
    Stdout,
)
from tests.conftest import free_port

pytestmark = pytest.mark.component

SRC = Path(__file__).resolve().parents[2] / "src"
T = TypeVar("T")


class AgentProcess:
    """``python3 -m sanbox.guest.agent --unix PATH``, restartable, always cleaned up."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = str(workdir / "agent.sock")
        self.log = workdir / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sanbox.guest.agent", "--unix", self.socket],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def connect(self, timeout: float = 10.0) -> Awaitable[AgentClient]:
        return AgentClient.connect(self.socket, timeout=timeout)


@pytest.fixture
def agent() -> Iterator[AgentProcess]:
    workdir = Path(tempfile.mkdtemp(prefix="sbx-agent-", dir="/tmp"))  # short socket path
    agent = AgentProcess(workdir)
    agent.start()
    try:
        yield agent
        agent.kill()
        log = agent.log.read_text()
        assert "Traceback" not in log, log  # one bad request must never crash a handler
    finally:
        agent.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def run(agent: AgentProcess, body: Callable[[AgentClient], Awaitable[T]], limit: float = 20) -> T:
    """Connect, run ``body(client)`` under a time limit, close."""

    async def main() -> T:
        client = await agent.connect()
        try:
            return await asyncio.wait_for(body(client), limit)
        finally:
            await client.close()

    return asyncio.run(main())


# -- exec ---------------------------------------------------------------------------


def test_exec_echo_stdin_and_separate_streams(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        r = await c.exec(["echo", "hello"])
        assert (r.exit_code, r.stdout, r.stderr, r.signal, r.timed_out) == (
            0,
            b"hello\n",
            b"",
            None,
            False,
        )
        r = await c.exec("tr a-z A-Z", stdin=b"shout")
        assert r.stdout == b"SHOUT"
        r = await c.exec("echo out; echo err >&2; exit 1")
        assert (r.exit_code, r.stdout, r.stderr) == (1, b"out\n", b"err\n")
        big = os.urandom(3 * 1024 * 1024)  # more than both flow-control windows
        r = await c.exec(["cat"], stdin=big)
        assert r.stdout == big

    run(agent, body)


def test_exec_env_cwd_user(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        r = await c.exec('echo "$FOO|$LANG|$HOME|$(pwd)"', env={"FOO": "bar"}, cwd="/tmp")
        assert r.stdout.decode().split("|")[:2] == ["bar", "C.UTF-8"]
        assert r.stdout.decode().strip().endswith("|/tmp")
        if os.geteuid() == 0:
            r = await c.exec(["id", "-un"], user="nobody")
            assert r.stdout.strip() == b"nobody"
        with pytest.raises(ExecError) as info:
            await c.exec(["true"], user="no-such-user-xyz")
        assert info.value.code == "unknown_user"
        with pytest.raises(ExecError) as info:
            await c.exec(["true"], cwd="/no/such/dir")
        assert info.value.code == "invalid_cwd"

    run(agent, body)


def test_exit_code_after_host_sigkill(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        proc = await c.exec_stream(["sleep", "30"])
        await proc.signal(signal.SIGKILL)
        result = await proc.wait(timeout=5)
        assert (result.exit_code, result.signal, result.timed_out) == (137, 9, False)

    run(agent, body)


def test_exec_stream_events_and_sigterm(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        proc = await c.exec_stream("echo ready; echo warn >&2; read line; echo got $line; sleep 30")
        seen: list[Any] = []
        async for event in proc.events(timeout=5):
            seen.append(event)
            if event == Stdout(b"ready\n"):
                await proc.write_stdin(b"ping\n")
            elif event == Stdout(b"got ping\n"):
                await proc.signal(signal.SIGTERM)
        assert Stderr(b"warn\n") in seen
        assert seen[-1] == Exit(exit_code=128 + 15, signal=15, timed_out=False)

    run(agent, body)


def test_twenty_concurrent_execs(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        started = time.monotonic()
        results = await asyncio.gather(
            *(c.exec(["sh", "-c", "sleep 0.5; echo $0", str(i)]) for i in range(25))
        )
        assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(25)]
        assert time.monotonic() - started < 5  # concurrent, not serialized

    run(agent, body)


def test_exec_timeout(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        started = time.monotonic()
        r = await c.exec("echo before; sleep 10", timeout=0.5)
        assert (r.exit_code, r.timed_out, r.stdout) == (124, True, b"before\n")
        assert time.monotonic() - started < 3

    run(agent, body)


def test_missing_program(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        with pytest.raises(CommandNotFoundError) as info:
            await c.exec(["/no/such/program"])
        assert info.value.exit_code == 127 and info.value.code == "command_not_found"
        with pytest.raises(CommandNotFoundError):
            await c.exec(["no-such-program-xyz", "arg"])
        r = await c.exec("no-such-program-xyz")  # through a shell: the shell's own 127
        assert r.exit_code == 127

    run(agent, body)


def test_background_process_does_not_hold_exec_open(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        started = time.monotonic()
        r = await c.exec("sleep 20 & echo $!")
        assert time.monotonic() - started < 2
        pid = int(r.stdout)
        os.kill(pid, 0)  # still running after the exec finished
        os.kill(pid, signal.SIGKILL)

    run(agent, body)


def test_slow_consumer_is_flow_controlled_and_starves_nobody(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        total = 20 * 1024 * 1024
        proc = await c.exec_stream(f"head -c {total} /dev/zero")
        await asyncio.sleep(0.5)  # do not read: the agent must stop at the window
        assert proc._channel._inbox.buffered <= p.INITIAL_WINDOW
        ping = await c.ping()  # other streams still flow
        assert ping.rtt < 1.0
        result = await proc.wait(timeout=15)
        assert len(result.stdout) == total

    run(agent, body)


# -- pty ----------------------------------------------------------------------------


def test_pty_size_and_resize(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        pty = await c.pty(["/bin/sh"], rows=24, cols=80)
        output = b""

        async def expect(text: bytes) -> None:
            nonlocal output
            while text not in output:
                chunk = await pty.read(timeout=5)
                assert chunk, output
                output += chunk
            output = output[output.index(text) + len(text) :]

        await pty.write(b"stty size; echo $TERM\n")
        await expect(b"24 80\r\nxterm-256color")
        await pty.resize(40, 132)
        await pty.write(b"stty size\n")
        await expect(b"40 132")
        await pty.write(b"exit 3\n")
        assert await pty.wait(timeout=5) == 3

    run(agent, body)


# -- files --------------------------------------------------------------------------


def test_put_get_50_mib_streams(agent: AgentProcess) -> None:
    local = agent.workdir / "big.bin"
    with open(local, "wb") as f:
        for _ in range(50):
            f.write(os.urandom(1024 * 1024))
    expected = hashlib.sha256(local.read_bytes()).hexdigest()
    remote = str(agent.workdir / "guest" / "sub" / "big.bin")

    async def body(c: AgentClient) -> None:
        assert await c.files.put(remote, str(local), mode=0o600) == 50 * 1024 * 1024
        assert os.stat(remote).st_mode & 0o777 == 0o600
        digest = hashlib.sha256()
        chunks = 0
        async for chunk in c.files.get(remote):
            assert 0 < len(chunk) <= p.CHUNK  # streamed, never the whole file at once
            digest.update(chunk)
            chunks += 1
        assert digest.hexdigest() == expected
        assert chunks >= 50 * 1024 * 1024 // p.CHUNK
        copy = agent.workdir / "copy.bin"
        assert await c.files.get_to(remote, copy) == 50 * 1024 * 1024
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == expected

    run(agent, body, limit=25)


def test_file_metadata_operations(agent: AgentProcess) -> None:
    base = str(agent.workdir / "tree")

    async def body(c: AgentClient) -> None:
        info = await c.files.mkdir(base + "/a/b")
        assert info.is_dir
        await c.files.put(base + "/a/x.txt", b"hello")

        async def gen() -> Any:
            yield b"one "
            yield b"two"

        await c.files.put(base + "/a/y.txt", gen())
        assert await c.files.read(base + "/a/y.txt") == b"one two"
        names = [(e.name, e.type, e.size) for e in await c.files.list(base + "/a")]
        assert names == [("b", "dir", names[0][2]), ("x.txt", "file", 5), ("y.txt", "file", 7)]
        st = await c.files.stat(base + "/a/x.txt")
        assert (st.size, st.mode, st.is_file) == (5, 0o644, True)
        assert abs(st.mtime - time.time()) < 60
        with pytest.raises(FileNotFoundInGuestError):
            await c.files.stat(base + "/missing")
        with pytest.raises(FileNotFoundInGuestError):
            await c.files.read(base + "/missing")
        with pytest.raises(RemoteError) as refused:
            await c.files.remove(base + "/a")
        assert refused.value.code == "not_empty"
        await c.files.remove(base + "/a/x.txt")
        await c.files.remove(base + "/a", recursive=True)
        assert await c.files.list(base) == []

    run(agent, body)


def test_dotdot_path_rejected_without_round_trip(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        await c.close()  # any round trip would now fail with AgentUnavailableError
        for call in (
            lambda: c.files.stat("/tmp/../etc/passwd"),
            lambda: c.files.put("relative.txt", b"x"),
            lambda: c.files.remove("/a/.."),
        ):
            with pytest.raises(InvalidPathError):
                await call()
        with pytest.raises(InvalidPathError):
            c.files.get("/x/../y")

    run(agent, body)


# -- tcp ----------------------------------------------------------------------------


def test_tcp_to_http_server_started_by_exec(agent: AgentProcess) -> None:
    port = free_port()

    async def body(c: AgentClient) -> None:
        with pytest.raises(ConnectionRefusedInGuestError):
            await c.tcp(port)
        r = await c.exec(
            f"nohup {sys.executable} -m http.server {port} --bind 127.0.0.1 "
            ">/dev/null 2>&1 & echo $!",
            cwd=str(agent.workdir),
        )
        pid = int(r.stdout)
        try:
            for _ in range(100):
                try:
                    conn = await c.tcp(port)
                    break
                except ConnectionRefusedInGuestError:
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("http.server did not start")
            await conn.write(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            await conn.close_write()
            response = b""
            while chunk := await conn.read(timeout=5):
                response += chunk
            await conn.close()
            assert response.startswith(b"HTTP/1.0 200")
            assert b"agent.log" in response  # the directory listing
        finally:
            os.kill(pid, signal.SIGKILL)

    run(agent, body)


# -- link: handshake, resync, reconnects, failures -----------------------------------


def test_agent_killed_fails_pending_exec_then_reconnects(agent: AgentProcess) -> None:
    async def body() -> None:
        client = await agent.connect()
        pending = asyncio.ensure_future(client.exec(["sleep", "30"]))
        await asyncio.sleep(0.3)
        agent.kill()
        started = time.monotonic()
        with pytest.raises(AgentUnavailableError):
            await asyncio.wait_for(pending, 5)
        assert time.monotonic() - started < 2
        assert client.closed
        with pytest.raises(AgentUnavailableError):
            await client.ping()
        await client.close()
        agent.start()
        again = await agent.connect()
        assert (await again.exec(["echo", "back"])).stdout == b"back\n"
        await again.close()

    asyncio.run(body())


def test_garbage_before_hello_still_handshakes(agent: AgentProcess) -> None:
    async def body() -> None:
        await (await agent.connect()).close()  # wait until the agent listens
        reader, writer = await asyncio.open_unix_connection(agent.socket)
        garbage = os.urandom(5000) + p.encode(p.Data(1, 1, b"stale")) + p.SYNC[:9]
        writer.write(garbage + p.SYNC + p.encode(p.Hello({"nonce": "n-123"})))
        decoder = p.Decoder()
        ack = None
        while ack is None:
            data = await asyncio.wait_for(reader.read(65536), 5)
            assert data
            ack = next((f for f in decoder.feed(data) if isinstance(f, p.HelloAck)), None)
        assert ack.body["nonce"] == "n-123" and ack.body["agent_version"] == p.AGENT_VERSION
        writer.close()
        await writer.wait_closed()

    asyncio.run(body())


def test_agent_recovers_from_garbage_mid_session(agent: AgentProcess) -> None:
    async def body(c: AgentClient) -> None:
        c.write(b"\x00not a frame at all\xff" * 10)  # the agent loses sync...
        assert (await c.ping()).agent_version == p.AGENT_VERSION  # ...SYNC before OPEN heals

    run(agent, body)


def test_second_connect_replaces_first(agent: AgentProcess) -> None:
    async def body() -> None:
        first = await agent.connect()
        running = asyncio.ensure_future(first.exec(["sleep", "30"]))
        await asyncio.sleep(0.2)
        second = await agent.connect()
        with pytest.raises(AgentUnavailableError):
            await asyncio.wait_for(running, 5)
        assert (await second.exec(["echo", "two"])).stdout == b"two\n"
        ping = await second.ping()
        assert ping.boot_id and ping.uptime > 0
        metrics = await second.metrics()
        assert metrics.memory["total"] > 0 and metrics.disk["total"] > 0
        await first.close()
        await second.close()

    asyncio.run(body())


def test_connect_without_agent_fails_fast() -> None:
    async def body() -> None:
        with pytest.raises(AgentUnavailableError):
            await AgentClient.connect("/tmp/sbx-no-such-agent.sock", timeout=0.3)

    asyncio.run(body())


def test_a_socket_that_accepts_and_never_answers_is_an_agent_timeout(tmp_path: Path) -> None:
    """A guest still booting: its port's socket (QEMU's) accepts at once, and the agent behind
    it has not started. Past the timeout, the typed error (a bare TimeoutError escaped before,
    and a template build said "unexpected TimeoutError in the server")."""

    async def body() -> None:
        path = str(tmp_path / "silent.sock")
        held: list[asyncio.StreamWriter] = []  # open, and silent
        server = await asyncio.start_unix_server(lambda r, w: held.append(w), path)
        async with server:
            with pytest.raises(AgentTimeoutError, match="did not complete the handshake"):
                await AgentClient.connect(path, timeout=0.5)
            for w in held:
                w.close()
                await w.wait_closed()

    asyncio.run(body())


def test_serves_a_character_device_like_a_virtio_port(tmp_path: Path) -> None:
    """``--port-path`` on a raw pty stands in for /dev/vportNpM: resync, handshake, exec."""
    import select
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with open(tmp_path / "agent.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sanbox.guest.agent", "--port-path", os.ttyname(slave)],
            env=env,
            stdout=log,
            stderr=log,
        )
    try:
        os.write(master, b"stale bytes" + p.SYNC + p.encode(p.Hello({"nonce": "port-1"})))
        decoder = p.Decoder()
        frames: list[p.Frame] = []
        opened = False
        deadline = time.monotonic() + 10
        while not any(isinstance(f, p.Close) for f in frames):
            assert time.monotonic() < deadline, frames
            if select.select([master], [], [], 0.1)[0]:
                frames += decoder.feed(os.read(master, 65536))
            acks = [f for f in frames if isinstance(f, p.HelloAck)]
            if acks and acks[0].body["nonce"] is None:  # a starting agent announces itself
                assert acks[0].body["restarted"] is True
                frames.remove(acks[0])
                acks.pop(0)
            if acks and not opened:
                assert acks[0].body["nonce"] == "port-1"
                opening = p.Open(1, "exec", {"argv": ["echo", "via-port"]})
                os.write(master, p.SYNC + p.encode(opening) + p.encode(p.Eof(1, p.STDIN)))
                opened = True
        assert p.Data(1, p.STDOUT, b"via-port\n") in frames
        exits = [f.body for f in frames if isinstance(f, p.Msg) and f.body["type"] == "exit"]
        assert exits == [{"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}]
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
        os.close(slave)
