"""A streamed exec over the WebSocket: events out, stdin, signals and resizes in."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

from ._websocket import (
    WebSocketClosedError,
    WebSocketConnector,
    WebSocketLike,
    WebSocketSession,
)
from .errors import SanboxError, error_from_code
from .types import ExecEvent, Exit, Stderr, Stdout


class AsyncExecStream(WebSocketSession):
    """Use as `async with computer.exec_stream(cmd) as stream: async for event in stream: ...`."""

    what = "the exec stream"

    def __init__(
        self,
        connector: WebSocketConnector,
        url: str,
        headers: dict[str, str],
        request: dict[str, Any],
    ) -> None:
        super().__init__(connector, url, headers)
        self._request = request
        self.exit: Exit | None = None

    async def opened(self, ws: WebSocketLike) -> None:
        await ws.send(json.dumps(self._request))

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
            message = json.loads(raw)
            kind = message.get("type")
            if kind == "stdout":
                yield Stdout(base64.b64decode(message.get("data", "")))
            elif kind == "stderr":
                yield Stderr(base64.b64decode(message.get("data", "")))
            elif kind == "exit":
                self.exit = Exit(
                    exit_code=int(message.get("exit_code", -1)),
                    signal=message.get("signal"),
                    timed_out=bool(message.get("timed_out", False)),
                )
                yield self.exit
            elif kind == "error":
                raise error_from_code(message.get("code"), str(message.get("message", "")))

    async def wait(self) -> Exit:
        """Drain the stream (discarding output) and return how the command ended."""
        async for _ in self.events():
            pass
        assert self.exit is not None
        return self.exit

    async def send_stdin(self, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        await self._send({"type": "stdin", "data": base64.b64encode(raw).decode()})

    async def send_eof(self) -> None:
        await self._send({"type": "eof"})

    async def signal(self, name: str = "SIGINT") -> None:
        await self._send({"type": "signal", "signal": name})

    async def resize(self, rows: int, cols: int) -> None:
        await self._send({"type": "resize", "rows": rows, "cols": cols})

    async def _send(self, message: dict[str, Any]) -> None:
        await self._connected().send(json.dumps(message))
