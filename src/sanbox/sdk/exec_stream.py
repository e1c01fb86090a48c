"""A streamed exec over the WebSocket: events out, stdin, signals and resizes in."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

from ._websocket import WebSocketClosedError, WebSocketConnector, WebSocketLike
from .errors import SanboxError, error_from_code
from .types import ExecEvent, Exit, Stderr, Stdout


class AsyncExecStream:
    """Use as `async with computer.exec_stream(cmd) as stream: async for event in stream: ...`."""

    def __init__(
        self,
        connector: WebSocketConnector,
        url: str,
        headers: dict[str, str],
        request: dict[str, Any],
    ) -> None:
        self._connector = connector
        self._url = url
        self._headers = headers
        self._request = request
        self._context: AbstractAsyncContextManager[WebSocketLike] | None = None
        self._ws: WebSocketLike | None = None
        self.exit: Exit | None = None

    async def __aenter__(self) -> AsyncExecStream:
        self._context = self._connector(self._url, self._headers)
        self._ws = await self._context.__aenter__()
        try:
            await self._ws.send(json.dumps(self._request))
        except BaseException as exc:
            await self._context.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._context is not None:
            await self._context.__aexit__(exc_type, exc, tb)
        self._context = self._ws = None

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

    def _connected(self) -> WebSocketLike:
        if self._ws is None:
            raise RuntimeError("use the exec stream inside `async with` (or `with`)")
        return self._ws
