"""``AgentClient``: one connection to a guest agent, multiplexing many streams."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import time
from collections.abc import Generator
from types import TracebackType
from typing import Any

from sanbox.guest import protocol as p

from ...tasks import cancel_and_wait
from . import process, readings
from .channel import Channel
from .dial import Dial, unix_dial
from .errors import (
    AgentError,
    AgentTimeoutError,
    AgentUnavailableError,
    ProtocolError,
    RemoteError,
)
from .files import Files
from .handshake import READ_SIZE, connected
from .kept import Kept
from .readings import Metrics, Ping
from .ssh import Ssh
from .strays import Strays
from .tcp import TcpStream
from .watch import Watches

log = logging.getLogger("sanbox.host.agent")

CALL_TIMEOUT = 30.0
# a guest that takes none of what was written for this long stopped reading (its agent stopped
# or replaced): the connection fails. A slow one that takes some is waited for, however long.
WRITE_STALL = 120.0  # (longer than any stop of its vCPUs: a stopped memory save of a large guest)


class _Connecting:
    """What ``AgentClient.connect`` returns: await it, or use it with ``async with``."""

    def __init__(self, dial: Dial, where: str, timeout: float, clock: bool = False) -> None:
        self._dial = dial
        self._where = where
        self._timeout = timeout
        self._clock = clock
        self._client: AgentClient | None = None

    def __await__(self) -> Generator[Any, None, AgentClient]:
        return AgentClient._connect(self._dial, self._where, self._timeout, self._clock).__await__()

    async def __aenter__(self) -> AgentClient:
        self._client = await self
        return self._client

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.close()


class AgentClient:
    """A handshaken connection to one guest agent. Create it with ``connect``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        decoder: p.Decoder,
        hello: dict[str, Any],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = decoder
        self.hello = hello
        self._channels: dict[int, Channel] = {}
        self._strays = Strays()  # frames for streams closed here, racing the CLOSE
        self._ids = itertools.count(1)
        self._error: AgentError | None = None
        self._written = 0  # bytes handed to the transport, to tell a slow guest from a stopped one
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())
        self.files = Files(self)
        self.kept = Kept(self, hello)
        self.ssh = Ssh(self)
        self.watches = Watches(self, hello)

    # -- connection ---------------------------------------------------------------

    @classmethod
    def connect(cls, path: str, *, timeout: float = 30.0, clock: bool = False) -> _Connecting:
        """Connect to the agent's Unix socket, retrying until it accepts, and handshake; with
        `clock`, the guest's clock is set in the handshake (`clock_set` says it was)."""
        return _Connecting(unix_dial(path), path, timeout, clock)

    @classmethod
    def dial(cls, dial: Dial, where: str, *, timeout: float = 30.0) -> _Connecting:
        """Connect through `dial` (a stream to the agent from elsewhere: a host agent's tunnel),
        retrying until it accepts, and handshake. `where` names it in errors."""
        return _Connecting(dial, where, timeout)

    @classmethod
    async def _connect(cls, dial: Dial, path: str, timeout: float, clock: bool) -> AgentClient:
        return cls(*await connected(dial, path, timeout, clock=clock))

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed: never hand a closed client out."""
        return self._error is not None or self._reader_task.done()

    async def close(self) -> None:
        if self._error is None:
            self._fail(AgentUnavailableError("client closed"))
        await cancel_and_wait(self._reader_task)
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()  # at once: `_fail` aborted the transport

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _fail(self, error: AgentError) -> None:
        """End the connection: every stream and every later call raises `error`. The transport
        is aborted, not closed: closing waits to flush what is written, forever if the guest
        stopped reading, and nothing written matters once the streams are gone."""
        if self._error is not None:
            return
        self._error = error
        for channel in list(self._channels.values()):
            channel.fail(error)
        self._channels.clear()
        self._writer.transport.abort()

    async def _read_loop(self) -> None:
        """Decode and route frames until the connection ends. However it ends (EOF, a broken
        frame, a stream overrunning its window, a bug) the client is failed: pending calls raise,
        ``closed`` is true and ``Machine.client()`` dials again."""
        try:
            # bytes after the HELLO_ACK that arrived with it are already in the decoder
            frames = self._decoder.feed(b"")
            while True:
                for frame in frames:
                    self._dispatch(frame)
                data = await self._reader.read(READ_SIZE)
                if not data:
                    raise AgentUnavailableError("agent closed the connection")
                frames = self._decoder.feed(data)
        except (p.ProtocolError, ProtocolError) as exc:
            log.warning("dropping the agent connection: %s", exc)
            error = exc if isinstance(exc, ProtocolError) else ProtocolError(f"malformed: {exc}")
            self._fail(error)
        except AgentError as exc:
            self._fail(exc)
        except (ConnectionError, OSError) as exc:
            self._fail(AgentUnavailableError(f"connection to agent lost: {exc}"))
        except Exception as exc:  # never leave a dead reader behind an open-looking client
            log.exception("agent connection reader failed")
            self._fail(ProtocolError(f"agent connection failed: {type(exc).__name__}: {exc}"))
        finally:
            self._fail(AgentUnavailableError("agent connection closed"))  # no-op if failed

    def _dispatch(self, frame: p.Frame) -> None:
        restarted = isinstance(frame, p.HelloAck) or (  # unsolicited: a new agent is there
            isinstance(frame, p.Msg) and frame.body.get("code") == "handshake_required"
        )
        if restarted:
            self._fail(AgentUnavailableError("the guest agent restarted; reconnect"))
            return
        channel = self._channels.get(frame.stream)
        if channel is None:
            self._strays.arrived(frame)  # dropped, or a ProtocolError that ends the connection
            return
        if isinstance(frame, p.Hello | p.Open):  # the host's to send, never the agent's
            raise ProtocolError(f"the agent sent {type(frame).__name__.upper()}")
        channel.deliver(frame)
        if isinstance(frame, p.Close):
            self._channels.pop(frame.stream, None)

    # -- the Connection protocol used by channels -----------------------------------

    def write(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        self._writer.write(data)
        self._written += len(data)

    def _taken(self) -> int:
        """Bytes the guest's end has taken (the transport passed them to the socket)."""
        return self._written - self._writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        try:
            await self._drained()
        except ConnectionError as exc:
            self._fail(AgentUnavailableError(f"connection to agent lost: {exc}"))
        if self._error is not None:  # failed, here or meanwhile (an aborted transport's drain
            raise self._error  # returns as if all were written)

    async def _drained(self) -> None:
        """Wait while the transport holds too much of what was written. A guest that takes none
        of it for `WRITE_STALL` s fails the connection: every caller's writes wait behind the
        same buffer."""
        while True:
            taken = self._taken()
            try:
                async with asyncio.timeout(WRITE_STALL):
                    await self._writer.drain()
                return
            except TimeoutError:
                if self._taken() == taken:
                    stalled = f"the agent took nothing written to it in {WRITE_STALL} s"
                    self._fail(AgentTimeoutError(stalled))
                    return

    def forget(self, stream_id: int) -> None:
        channel = self._channels.pop(stream_id, None)
        if channel is not None:  # not closed by the guest yet: its last frames may follow
            self._strays.closed(stream_id, channel.window_left)

    # -- streams ------------------------------------------------------------------------

    async def open(
        self,
        kind: str,
        params: dict[str, Any],
        *,
        exec_stream: bool = False,
        stdin_eof: bool = False,
    ) -> Channel:
        """Open a raw stream (SYNC first, so an agent that lost sync recovers here); with
        `stdin_eof`, its input ends in the same write (the agent sees both in one read)."""
        if self._error is not None:
            raise self._error
        channel = Channel(self, next(self._ids), exec_stream=exec_stream)
        self._channels[channel.id] = channel
        opening = p.SYNC + p.encode(p.Open(channel.id, kind, params))
        if stdin_eof:
            opening += p.encode(p.Eof(channel.id, p.STDIN))
        try:
            self.write(opening)
            await self.drain()
        except BaseException:
            await channel.close()
            raise
        return channel

    async def call(
        self, kind: str, params: dict[str, Any], *, timeout: float | None = CALL_TIMEOUT
    ) -> dict[str, Any]:
        """One request, one ``result`` message; `timeout` bounds all of it, the request's
        writing too (behind a guest that stopped reading, that is where it waits)."""
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                channel = await self.open(kind, params)
                try:
                    body = await channel.next_msg()
                finally:
                    await channel.close()
        except TimeoutError:
            if not deadline.expired():
                raise  # an AgentTimeoutError of the connection's
            raise AgentTimeoutError(f"{kind}: no answer in {timeout} s") from None
        if body is None or body.get("type") != "result":
            raise RemoteError("bad_reply", f"unexpected reply to {kind}: {body!r}")
        return body

    async def ping(self, timeout: float = 5.0) -> Ping:
        start = time.monotonic()
        body = await self.call("control", {"op": "ping"}, timeout=timeout)
        return readings.ping_of(body, time.monotonic() - start)

    async def catch_up_clock(self) -> None:
        """The guest's clock set to the host's, unless the handshake did (its HELLO_ACK's
        `clock_set`: not an agent from before). A failure is logged, not raised: a guest whose
        clock is behind still runs."""
        if self.hello.get("clock_set") is True:
            return
        try:
            await self.set_clock()
        except AgentError as exc:
            log.warning("the guest's clock was not set: %s", exc)

    async def set_clock(self, unix_time: float | None = None) -> None:
        when = time.time() if unix_time is None else unix_time
        await self.call("control", {"op": "set_clock", "time": when})

    async def set_hostname(self, name: str) -> None:
        await self.call("control", {"op": "set_hostname", "hostname": name})

    async def listening(self, port: int) -> bool:
        """Whether the guest's kernel lists a listener that a dial of 127.0.0.1:`port` reaches
        (no dial: the service is not woken). False: not seen, or an agent too old to say (the
        caller dials to know)."""
        try:
            body = await self.call("control", {"op": "listening", "port": port})
        except RemoteError as exc:
            if exc.code == "bad_request":  # an agent from before the op (a saved guest's)
                return False
            raise
        return body.get("listening") is True

    async def fs_freeze(self, timeout: float = 10.0) -> None:
        """Freeze the guest's root filesystem (thawed by the guest itself after `timeout`)."""
        await self.call("control", {"op": "fs_freeze", "timeout": timeout})

    async def fs_thaw(self) -> bool:
        return bool((await self.call("control", {"op": "fs_thaw"})).get("thawed"))

    async def new_identity(
        self, hostname: str, machine_id: str, entropy: bytes, unix_time: float
    ) -> None:
        """A copied computer's own identity (hostname, machine-id, `entropy` credited and
        reseeded, the clock; SSH host keys forgotten: `ssh.host_key()` makes the next)."""
        params = {
            "op": "new_identity",
            "hostname": hostname,
            "machine_id": machine_id,
            "entropy": base64.b64encode(entropy).decode(),
            "time": unix_time,
        }
        await self.call("control", params, timeout=120.0)

    async def metrics(self) -> Metrics:
        return readings.metrics_of(await self.call("control", {"op": "metrics"}))

    async def services(self) -> list[dict[str, object]]:
        """The template services' statuses in the guest: name, state (running, backoff, exited,
        stopped), pid, restarts, last_exit ({code, signal}), started_at."""
        found = (await self.call("control", {"op": "services"})).get("services")
        return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []

    async def exec(
        self,
        cmd: list[str] | str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
    ) -> process.ExecResult:
        """Run a command to completion and collect its output: the first ``max_output`` bytes of
        each stream (all of it if ``None``); the rest is read and dropped, and the result's
        ``stdout_truncated``/``stderr_truncated`` say so. Without `stdin` the command's input
        ends as it is opened: no second frame for the guest to wake for while it runs."""
        proc = await self.exec_stream(
            cmd, env=env, cwd=cwd, user=user, timeout=timeout, stdin=bool(stdin)
        )
        return await proc.communicate(stdin, timeout, max_output)

    async def exec_stream(
        self,
        cmd: list[str] | str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        timeout: float | None = None,
        stdin: bool = True,
    ) -> process.ExecProcess:
        """A command started; `stdin=False`: its input is closed from the start."""
        params = process.command_params(cmd, env=env, cwd=cwd, user=user)
        if timeout is not None:
            params["timeout"] = timeout
        channel = await self.open("exec", params, exec_stream=True, stdin_eof=not stdin)
        return await process.ExecProcess.started(channel, stdin_closed=not stdin)

    async def pty(
        self,
        cmd: list[str] | str | None = None,
        *,
        rows: int = 24,
        cols: int = 80,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        term: str = "xterm-256color",
    ) -> process.PtySession:
        params = process.command_params(cmd, env=env, cwd=cwd, user=user)
        params.update(rows=rows, cols=cols, term=term)
        channel = await self.open("pty", params, exec_stream=True)
        return await process.PtySession.started(channel)

    async def tcp(self, port: int, host: str = "127.0.0.1") -> TcpStream:
        channel = await self.open("tcp", {"host": host, "port": port})
        return await TcpStream.connected(channel)
