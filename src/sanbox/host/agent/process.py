"""Commands in the guest: ``ExecProcess`` (pipes) and ``PtySession`` (a terminal)."""

from __future__ import annotations

import asyncio
import signal as signals
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sanbox.guest import protocol as p

from . import reply
from .channel import Channel
from .errors import AgentTimeoutError, AgentUnavailableError, ExecError

START_TIMEOUT = 30.0
EXIT_GRACE = 10.0  # how long past the guest-side timeout the client waits


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    signal: int | None
    timed_out: bool
    stdout_truncated: bool = False  # more output came than was kept (the first bytes are)
    stderr_truncated: bool = False


class Capture:
    """The first ``limit`` bytes of one output stream (all if ``None``); the rest is counted."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.total = 0
        self._kept = bytearray()

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = len(data) if self.limit is None else self.limit - len(self._kept)
        if room > 0:
            self._kept += data[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._kept)

    def value(self) -> bytes:
        return bytes(self._kept)


@dataclass(frozen=True)
class Stdout:
    data: bytes


@dataclass(frozen=True)
class Stderr:
    data: bytes


@dataclass(frozen=True)
class Exit:
    exit_code: int
    signal: int | None
    timed_out: bool
    core_dumped: bool = False  # the signal dumped core (an agent before it never says so)


ExecEvent = Stdout | Stderr | Exit


def command_params(
    cmd: list[str] | str | None,
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    user: str | int | None,
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if isinstance(cmd, str):
        params["cmd"] = cmd
    elif cmd is not None:
        if not cmd:
            raise ValueError("empty argv")
        params["argv"] = [str(a) for a in cmd]
    if env is not None:
        params["env"] = dict(env)
    if cwd is not None:
        params["cwd"] = cwd
    if user is not None:
        params["user"] = user
    return params


def _exit_from(body: dict[str, Any]) -> Exit:
    return Exit(
        reply.integer(body.get("exit_code"), "exit code"),
        reply.optional_integer(body.get("signal"), "exit signal"),
        reply.flag(body.get("timed_out"), "exit's timed_out"),
        reply.flag(body.get("core_dumped", False), "exit's core_dumped"),
    )


async def _started(channel: Channel) -> int:
    try:
        body = await channel.next_msg(START_TIMEOUT)
        if body is None or body.get("type") != "started":
            raise ExecError("bad_reply", f"agent did not start the command: {body!r}")
        return reply.integer(body.get("pid"), "pid")
    except BaseException:
        await channel.close()
        raise


class ExecProcess:
    """A running command. Consume ``events()`` or call ``wait()``; not both at once."""

    def __init__(self, channel: Channel, pid: int, stdin_closed: bool = False) -> None:
        self._channel = channel
        self.pid = pid
        self.exit: Exit | None = None
        self.kept = False  # a kept process (kept.py): it outlives this stream
        self._stdin_closed = stdin_closed

    @classmethod
    async def started(cls, channel: Channel, *, stdin_closed: bool = False) -> ExecProcess:
        """`stdin_closed`: its input's EOF went with the OPEN."""
        return cls(channel, await _started(channel), stdin_closed)

    async def write_stdin(self, data: bytes) -> None:
        await self._channel.send_data(p.STDIN, data)

    async def close_stdin(self) -> None:
        if not self._stdin_closed:
            self._stdin_closed = True
            await self._channel.send(p.Eof(self._channel.id, p.STDIN))

    async def signal(self, sig: int = signals.SIGTERM) -> None:
        """Send ``sig`` to the command's process group."""
        await self._channel.send(p.Msg(self._channel.id, {"type": "signal", "signal": int(sig)}))

    async def events(self, timeout: float | None = None) -> AsyncIterator[ExecEvent]:
        """Output and the final ``Exit``; ``timeout`` bounds each wait for the next event."""
        try:
            while (frame := await self._channel.next(timeout)) is not None:
                if isinstance(frame, p.Data):
                    if frame.channel == p.STDOUT:
                        yield Stdout(frame.data)
                    elif frame.channel == p.STDERR:
                        yield Stderr(frame.data)
                elif isinstance(frame, p.Msg):
                    self._channel.raise_if_error(frame.body)
                    if frame.body.get("type") == "exit":
                        self.exit = _exit_from(frame.body)
                        yield self.exit
            if self.exit is None:
                raise AgentUnavailableError("stream ended without an exit status")
        finally:
            await self._channel.close()

    async def wait(self, timeout: float | None = None, max_output: int | None = None) -> ExecResult:
        """Wait for exit, collecting the output that ``events()`` did not consume: the first
        ``max_output`` bytes of each stream; the rest is drained (the command never blocks on a
        full pipe) and dropped."""
        out, err = Capture(max_output), Capture(max_output)

        async def collect() -> None:
            async for event in self.events():
                if isinstance(event, Stdout):
                    out.add(event.data)
                elif isinstance(event, Stderr):
                    err.add(event.data)

        if self.exit is None:
            try:
                async with asyncio.timeout(timeout):
                    await collect()
            except TimeoutError:
                await self._channel.close()
                raise AgentTimeoutError(f"command did not finish in {timeout} s") from None
        assert self.exit is not None
        e = self.exit
        return ExecResult(
            e.exit_code,
            out.value(),
            err.value(),
            e.signal,
            e.timed_out,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
        )

    async def communicate(
        self, stdin: bytes | None, timeout: float | None, max_output: int | None = None
    ) -> ExecResult:
        """Feed ``stdin`` (then EOF) while collecting output; used by ``AgentClient.exec``."""

        async def feed() -> None:
            if stdin:
                await self.write_stdin(stdin)
            await self.close_stdin()

        feeder = asyncio.get_running_loop().create_task(feed())
        try:
            wait_limit = None if timeout is None else timeout + EXIT_GRACE
            return await self.wait(wait_limit, max_output)
        finally:
            if not feeder.done():
                feeder.cancel()
            results = await asyncio.gather(feeder, return_exceptions=True)
            del results  # feeding fails harmlessly when the command exits first
            await self._channel.close()


class PtySession:
    """An interactive program in a pseudo-terminal."""

    def __init__(self, channel: Channel, pid: int) -> None:
        self._channel = channel
        self.pid = pid
        self.exit: Exit | None = None
        self.kept = False  # a kept process (kept.py): it outlives this stream

    @classmethod
    async def started(cls, channel: Channel) -> PtySession:
        return cls(channel, await _started(channel))

    async def write(self, data: bytes) -> None:
        await self._channel.send_data(p.STDIN, data)

    async def resize(self, rows: int, cols: int) -> None:
        await self._channel.send(
            p.Msg(self._channel.id, {"type": "resize", "rows": rows, "cols": cols})
        )

    async def signal(self, sig: int) -> None:
        await self._channel.send(p.Msg(self._channel.id, {"type": "signal", "signal": int(sig)}))

    async def read(self, timeout: float | None = None) -> bytes:
        """The next output chunk; ``b""`` once the program exited and output ended."""
        while (frame := await self._channel.next(timeout)) is not None:
            if isinstance(frame, p.Data) and frame.data:
                return frame.data
            if isinstance(frame, p.Msg):
                self._channel.raise_if_error(frame.body)
                if frame.body.get("type") == "exit":
                    self.exit = _exit_from(frame.body)
        await self._channel.close()
        return b""

    async def wait(self, timeout: float | None = None) -> int:
        """Wait for the program to exit (discarding unread output); return its exit code."""
        while self.exit is None:
            if not await self.read(timeout):
                break
        if self.exit is None:
            raise AgentUnavailableError("terminal ended without an exit status")
        return self.exit.exit_code

    async def close(self) -> None:
        """End the session (the agent hangs up the terminal)."""
        await self._channel.close()
