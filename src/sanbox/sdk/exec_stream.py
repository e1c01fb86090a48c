"""A streamed exec over the WebSocket: events out, stdin, signals and resizes in."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ._websocket import (
    WebSocketClosedError,
    WebSocketConnector,
    WebSocketLike,
    WebSocketSession,
)
from .errors import SanboxError, error_from_code
from .exec_protocol import (
    ClientMessage,
    ExecEof,
    ExecError,
    ExecEvent,
    ExecResize,
    ExecSignal,
    ExecStart,
    ExecStdin,
    Exit,
    decode,
    signal_number,
)


class AsyncExecStream(WebSocketSession):
    """Use as `async with computer.exec_stream(cmd) as stream: async for event in stream: ...`."""

    what = "the exec stream"

    def __init__(
        self,
        connector: WebSocketConnector,
        url: str,
        headers: dict[str, str],
        request: ExecStart,
    ) -> None:
        super().__init__(connector, url, headers)
        self._request = request
        self.exit: Exit | None = None

    async def opened(self, ws: WebSocketLike) -> None:
        await self.send_first(ws, self._request.encode())

    def __aiter__(self) -> AsyncIterator[ExecEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[ExecEvent]:
        """Stdout/Stderr events, then one Exit; an error message raises its `SanboxError`."""
        ws = self._connected()
        while self.exit is None:
            try:
                raw = await ws.recv()
            except WebSocketClosedError:
                raise SanboxError(
                    "the exec stream closed before the command exited", code="stream_closed"
                ) from None
            event = decode(raw)
            if isinstance(event, ExecError):
                raise error_from_code(event.code, event.message)
            if isinstance(event, Exit):
                self.exit = event
            if event is not None:
                yield event

    async def wait(self) -> Exit:
        """Drain the stream (discarding output) and return how the command ended."""
        async for _ in self.events():
            pass
        assert self.exit is not None
        return self.exit

    async def send_stdin(self, data: bytes | str) -> None:
        await self._send(ExecStdin(data.encode() if isinstance(data, str) else data))

    async def send_eof(self) -> None:
        """End the command's stdin. A command that has ended already (the server closed the
        stream normally after its exit) has no stdin to end: that is no error."""
        try:
            await self._send(ExecEof())
        except WebSocketClosedError as exc:
            if exc.close_code != 1000:
                raise

    async def signal(self, sig: int | str = "SIGINT") -> None:
        """Signal the command's process group: a number, or a name ("SIGTERM", "TERM")."""
        await self._send(ExecSignal(signal_number(sig)))

    async def resize(self, rows: int, cols: int) -> None:
        await self._send(ExecResize(rows, cols))

    async def _send(self, message: ClientMessage) -> None:
        await self._connected().send(message.encode())
