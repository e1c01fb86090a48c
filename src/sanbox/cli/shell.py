"""`sanbox exec NAME -- CMD` (streamed, exits with the command's code) and `sanbox shell NAME`
(an interactive PTY, like ssh), both over the exec WebSocket."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import threading
from typing import Annotated, Any

import typer

from ..sdk import AsyncExecStream, Exit, Stderr, Stdout
from . import config
from ._options import EnvOption, pairs


def exec_(
    name: Annotated[str, typer.Argument(help="Computer name or id.")],
    cmd: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    env: EnvOption = None,
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory."),
    user: str | None = typer.Option(None, "--user", "-u", help="Run as this user."),
) -> None:
    """Run a command, streaming its output; exits with its exit code.

    Put the command after `--` when it has options of its own: `sanbox exec box -- ls -l`.
    """
    envs = pairs(env, "--env")
    with config.reported():
        code = asyncio.run(_stream(name, cmd, envs, cwd, user, pty=False))
    raise typer.Exit(code)


def shell(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
    """Open an interactive shell (a PTY), like ssh."""
    with config.reported():
        code = asyncio.run(_stream(name, None, {}, None, None, pty=True))
    raise typer.Exit(code)


async def _stream(
    name: str, cmd: list[str] | None, env: dict[str, str], cwd: str | None, user: str | None,
    pty: bool,
) -> int:  # fmt: skip
    size = shutil.get_terminal_size()
    async with config.async_client() as client:
        computer = await client.computers.get(name)
        request = computer.exec_stream(cmd, env, cwd, user, pty, size.lines, size.columns)
        async with request as stream, _Terminal(stream, raw=pty and sys.stdin.isatty()):
            out, err = sys.stdout.buffer, sys.stderr.buffer
            async for event in stream:
                if isinstance(event, Stdout):
                    out.write(event.data)
                    out.flush()
                elif isinstance(event, Stderr):
                    err.write(event.data)
                    err.flush()
                elif isinstance(event, Exit):
                    return _exit_status(event)
    return 1


def _exit_status(event: Exit) -> int:
    if event.timed_out:
        return 124
    if event.signal and event.exit_code < 0:
        number = getattr(signal, event.signal, None)
        return 128 + int(number) if number is not None else 1
    return event.exit_code


class _Terminal:
    """Forward local stdin (raw when a TTY) and window resizes to the stream; restore after."""

    def __init__(self, stream: AsyncExecStream, raw: bool) -> None:
        self._stream, self._raw = stream, raw
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._saved: Any = None

    async def __aenter__(self) -> _Terminal:
        loop = asyncio.get_running_loop()
        if self._raw:
            import termios
            import tty

            fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            tty.setraw(fd)
            loop.add_reader(fd, lambda: self._queue.put_nowait(os.read(fd, 65536)))
            loop.add_signal_handler(signal.SIGWINCH, self._resized)
            self._tasks.append(asyncio.create_task(self._pump()))
        elif not sys.stdin.isatty():
            threading.Thread(target=self._read_blocking, args=(loop,), daemon=True).start()
            self._tasks.append(asyncio.create_task(self._pump()))
        return self

    def _read_blocking(self, loop: asyncio.AbstractEventLoop) -> None:
        source = sys.stdin.buffer
        while True:
            try:
                chunk = source.read1(65536) if hasattr(source, "read1") else source.read(65536)
            except (OSError, ValueError):
                chunk = b""
            loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
            if not chunk:
                return

    async def _pump(self) -> None:
        while chunk := await self._queue.get():
            await self._stream.send_stdin(chunk)
        await self._stream.send_eof()

    def _resized(self) -> None:
        size = shutil.get_terminal_size()
        self._tasks.append(asyncio.create_task(self._stream.resize(size.lines, size.columns)))

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._raw:
            import termios

            loop = asyncio.get_running_loop()
            loop.remove_reader(sys.stdin.fileno())
            loop.remove_signal_handler(signal.SIGWINCH)
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_)
    app.command("shell")(shell)
