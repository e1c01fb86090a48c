"""What `sanbox exec` and `sanbox shell` run once their arguments are parsed: the exec WebSocket
between the local terminal and the command. No typer here: `sanbox exec`'s fast path
(sanbox.cli.fastpath) runs it without loading the command-line framework."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..sdk.exec_protocol import Exit, Stderr, Stdout
from ..sdk.exec_stream import AsyncExecStream

if TYPE_CHECKING:
    from ..sdk import AsyncSanbox


LOGIN_SHELL = ["/bin/sh", "-c", 'exec "${SHELL:-/bin/sh}" -l']  # the user's own, as a PTY's


def with_terminal(cmd: list[str] | None, pty: bool) -> tuple[list[str] | None, bool]:
    """What to run, and whether in a PTY: a shell whose input is not a terminal
    (`... | sanbox shell`) gets none, as ssh gives none, so it reads its commands and ends at
    the input's end (a PTY's shell never sees that end)."""
    if pty and cmd is None and not sys.stdin.isatty():
        return LOGIN_SHELL, False
    return cmd, pty


async def stream(
    client: AsyncSanbox,
    name: str,
    cmd: list[str] | None,
    env: dict[str, str],
    cwd: str | None,
    user: str | None,
    pty: bool,
) -> int:
    """Run `cmd` (None with `pty`: a login shell) on computer `name`, relaying the terminal;
    the exit status to exit with."""
    cmd, pty = with_terminal(cmd, pty)
    size = shutil.get_terminal_size()
    async with client:
        computer = await client.computers.get(name)
        return await relay(
            computer.exec_stream(cmd, env, cwd, user, pty, size.lines, size.columns), pty
        )


async def relay(request: AsyncExecStream, pty: bool) -> int:
    """Open the exec stream and relay it to the terminal until the command exits; its status."""
    async with request as session, Terminal(session, raw=pty and sys.stdin.isatty()):
        out, err = sys.stdout.buffer, sys.stderr.buffer
        async for event in session:
            if isinstance(event, Stdout):
                out.write(event.data)
                out.flush()
            elif isinstance(event, Stderr):
                err.write(event.data)
                err.flush()
            elif isinstance(event, Exit):
                return exit_status(event)
    return 1


def exit_status(event: Exit) -> int:
    if event.timed_out:
        return 124
    if event.signal and event.exit_code < 0:
        return 128 + event.signal
    return event.exit_code


class Terminal:
    """Forward local stdin (raw when a TTY) and window resizes to the stream; restore after."""

    def __init__(self, stream: AsyncExecStream, raw: bool) -> None:
        self._stream, self._raw = stream, raw
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._saved: Any = None

    async def __aenter__(self) -> Terminal:
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
        else:  # a terminal, and no PTY: the command's input ends now (docker exec without -i)
            self._tasks.append(asyncio.create_task(self._stream.send_eof()))
        return self

    def _read_blocking(self, loop: asyncio.AbstractEventLoop) -> None:
        # the descriptor, not sys.stdin.buffer: a read still blocked in this daemon thread when
        # the command ends would hold the buffer's lock, and the interpreter's exit aborts on it
        # ("Fatal Python error: _enter_buffered_busy", status 134)
        source: Any = sys.stdin.buffer
        try:
            fd = sys.stdin.fileno()
        except (OSError, ValueError):  # no descriptor (an input given in-process): its buffer
            fd = -1
        while True:
            try:
                if fd >= 0:
                    chunk = os.read(fd, 65536)
                else:
                    chunk = source.read1(65536) if hasattr(source, "read1") else source.read(65536)
            except (OSError, ValueError):
                chunk = b""
            try:
                loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
            except RuntimeError:  # the command ended and its loop closed: nobody reads on
                return
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
