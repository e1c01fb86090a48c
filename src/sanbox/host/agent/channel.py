"""One multiplexed stream as the host client sees it: a bounded frame inbox plus flow control."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from sanbox.guest import protocol as p
from sanbox.guest.flow import ReceiveWindow, SendWindow

from .errors import AgentError, AgentTimeoutError, AgentUnavailableError, remote_error
from .inbox import Inbox

_UNLIMITED = 1 << 62


class Connection(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def forget(self, stream_id: int) -> None: ...


class Channel:
    """Frames for one stream id. ``next()`` yields them in order, ``None`` after CLOSE.

    What waits unread is bounded by the receive window granted to the agent (see ``Inbox``):
    ``deliver`` raises ``ProtocolError`` for a frame beyond it, and the connection drops.
    """

    def __init__(self, conn: Connection, stream_id: int, *, exec_stream: bool = False) -> None:
        self.id = stream_id
        self._conn = conn
        self._exec = exec_stream
        self._inbox = Inbox()
        self._wake = asyncio.Event()
        self._send_window = SendWindow()
        self._recv_window = ReceiveWindow()
        self._error: AgentError | None = None
        self.remote_closed = False
        self.local_closed = False

    @property
    def window_left(self) -> int:
        """DATA bytes the agent may still send on this stream."""
        return self._inbox.window_left

    # -- called by the connection's reader ------------------------------------

    def deliver(self, frame: p.Frame) -> None:
        if isinstance(frame, p.Window):
            self._send_window.grant(frame.credit)
            return
        if isinstance(frame, p.Close):
            self.remote_closed = True
            self._send_window.grant(_UNLIMITED)  # wake writers; they stop sending
        else:
            self._inbox.put(frame)
        self._wake.set()

    def fail(self, error: AgentError) -> None:
        if self._error is None:
            self._error = error
        self._send_window.grant(_UNLIMITED)
        self._wake.set()

    # -- receiving --------------------------------------------------------------

    async def next(self, timeout: float | None = None) -> p.Frame | None:
        """The next frame, or ``None`` once the agent closed the stream."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._inbox:
            if self._error is not None:
                raise self._error
            if self.remote_closed:
                return None
            self._wake.clear()
            remaining = None if deadline is None else deadline - loop.time()
            try:
                async with asyncio.timeout(remaining):
                    await self._wake.wait()
            except TimeoutError:
                raise AgentTimeoutError(f"stream {self.id}: no answer in {timeout} s") from None
        frame = self._inbox.pop()
        if isinstance(frame, p.Data):
            credit = self._recv_window.consumed(len(frame.data))
            if credit and not self.local_closed and not self.remote_closed:
                self._conn.write(p.encode(p.Window(self.id, credit)))
                self._inbox.allow(credit)
        return frame

    async def next_msg(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Skip to the next MSG; raise its error if it is one; ``None`` at CLOSE."""
        while (frame := await self.next(timeout)) is not None:
            if isinstance(frame, p.Msg):
                self.raise_if_error(frame.body)
                return frame.body
        return None

    def raise_if_error(self, body: dict[str, Any]) -> None:
        if body.get("type") == "error":
            raise remote_error(body, exec_stream=self._exec)

    # -- sending ------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self.local_closed:
            raise AgentUnavailableError(f"stream {self.id} is closed")

    async def send(self, frame: p.Frame) -> None:
        self._check()
        if self.remote_closed:
            return
        self._conn.write(p.encode(frame))
        await self._conn.drain()

    async def send_data(self, channel: int, data: bytes, stall: float | None = None) -> bool:
        """Send under flow control; False if the agent closed the stream meanwhile. `stall`: how
        long to wait for credit (None: as long as the agent withholds it, as a command that does
        not read its input makes it do)."""
        view = memoryview(data)
        while view:
            try:
                async with asyncio.timeout(stall):
                    want = await self._send_window.take(min(len(view), p.CHUNK))
            except TimeoutError:
                raise AgentTimeoutError(f"stream {self.id}: no credit in {stall} s") from None
            self._check()
            if self.remote_closed:
                return False
            self._conn.write(p.encode(p.Data(self.id, channel, bytes(view[:want]))))
            view = view[want:]
            await self._conn.drain()
        return True

    async def close(self) -> None:
        """Tell the agent to end the stream (killing its process, if any)."""
        if self.local_closed:
            return
        self.local_closed = True
        self._conn.forget(self.id)
        if self._error is None and not self.remote_closed:
            with contextlib.suppress(AgentError):
                self._conn.write(p.encode(p.Close(self.id)))


class Requests(Protocol):
    """What the agent's services (files, SSH) ask of its client: raw streams and calls."""

    async def open(
        self, kind: str, params: dict[str, Any], *, exec_stream: bool = False
    ) -> Channel: ...

    async def call(
        self, kind: str, params: dict[str, Any], *, timeout: float | None = ...
    ) -> dict[str, Any]: ...
