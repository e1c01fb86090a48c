"""A process's pipes relayed by event-loop callbacks, not tasks.

Each descriptor is registered with the loop once for as long as it is relayed, and read or
written in the loop's own callback: no future, no task step and no epoll registration per read
(each costs 0.1-0.3 ms under TCG). When a command ends, its pipes' EOF and its pidfd are seen in
the same pass of the loop, so its end is reported at once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from . import protocol as p
from .flow import SendWindow

SendFrame = Callable[[p.Frame], None]


class StdinRelay:
    """The host's bytes written to the process: at once while the pipe takes them, else queued
    and written when it is writable. Credit goes back (``consumed``) as bytes are written, or
    dropped once the process has closed its input, so the host is never left waiting."""

    def __init__(
        self, fd: int, consumed: Callable[[int], None], at_eof: Callable[[int], None]
    ) -> None:
        self.fd = fd
        self._consumed = consumed
        self._at_eof = at_eof
        self._loop = asyncio.get_running_loop()
        self._pending = bytearray()
        self._eof = False
        self._broken = False

    def push(self, data: bytes) -> None:
        if self._broken or self._eof:
            self._consumed(len(data))
            return
        if self._pending:
            self._pending += data
            return
        written = self._write(data)
        if written < len(data) and not self._broken:
            self._pending += data[written:]
            self._loop.add_writer(self.fd, self._writable)

    def eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        if not self._pending:
            self._at_eof(self.fd)

    def close(self) -> None:
        """Stop writing (the stream ended); the caller closes the descriptor."""
        if self._pending:
            self._loop.remove_writer(self.fd)
            self._pending.clear()

    def _write(self, data: bytes | bytearray) -> int:
        """Write what the pipe takes now; all of it counts as written once the pipe is broken."""
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError:  # the process closed its input; keep granting credit
            self._broken = True
            written = len(data)
        self._consumed(written)
        return written

    def _writable(self) -> None:
        written = self._write(self._pending)
        if self._broken:
            self._pending.clear()
        del self._pending[:written]
        if not self._pending:
            self._loop.remove_writer(self.fd)
            if self._eof:
                self._at_eof(self.fd)


class OutputRelay:
    """Output descriptors sent as DATA on their channels, under the stream's send window: a
    descriptor is read only while there is credit, and waits (unregistered) for more."""

    def __init__(self, stream_id: int, window: SendWindow, send: SendFrame) -> None:
        self._id = stream_id
        self._window = window
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._open: dict[int, int] = {}  # descriptor -> channel, until its EOF
        self._stalled: set[int] = set()  # open, waiting for credit
        self._last_read: dict[int, float] = {}
        self._ended: asyncio.Future[None] | None = None

    @property
    def open(self) -> bool:
        return bool(self._open)

    def add(self, fd: int, channel: int) -> None:
        self._open[fd] = channel
        self._last_read[fd] = self._loop.time()
        self._loop.add_reader(fd, self._readable, fd)

    def credit(self) -> None:
        """The window grew: read again what waited for it."""
        if self._window.available > 0:
            for fd in self._stalled:
                self._loop.add_reader(fd, self._readable, fd)
            self._stalled.clear()

    def silent_for(self, idle: float) -> bool:
        """Every open descriptor has had nothing to read for ``idle`` seconds (one that waits
        for credit is not silent: the host is slow, not the process)."""
        now = self._loop.time()
        return not self._stalled and all(now - self._last_read[fd] > idle for fd in self._open)

    async def ended(self, idle: float) -> None:
        """Wait for every descriptor's EOF, or until all still open stay silent for ``idle``
        seconds (background processes holding the pipes open)."""
        while self._open:
            self._ended = self._loop.create_future()
            await asyncio.wait([self._ended], timeout=idle / 4)
            if self._open and self.silent_for(idle):
                return

    def stop(self) -> None:
        """Stop reading whatever is still open; the caller closes the descriptors."""
        for fd in self._open:
            self._loop.remove_reader(fd)
        self._open.clear()
        self._stalled.clear()

    def _readable(self, fd: int) -> None:
        want = min(p.CHUNK, self._window.available)
        if want <= 0:
            self._loop.remove_reader(fd)
            self._stalled.add(fd)
            return
        try:
            data = os.read(fd, want)
        except BlockingIOError:
            return
        except OSError:  # EIO: a terminal whose last user closed it
            data = b""
        self._last_read[fd] = self._loop.time()
        channel = self._open[fd]
        if data:
            self._window.spend(len(data))
            self._send(p.Data(self._id, channel, data))
            return
        self._loop.remove_reader(fd)
        del self._open[fd]
        self._send(p.Eof(self._id, channel))
        if not self._open and self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
