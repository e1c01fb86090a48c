"""WebSocket connections behind one small Protocol, so tests and ASGI apps can stand in.

`websockets_connector` is the real one. `asgi_connector(app)` drives an ASGI app in-process
(the WebSocket twin of `httpx.ASGITransport`), which `AsyncSanbox` picks by itself when it is
given an `httpx.ASGITransport`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Protocol, Self
from urllib.parse import urlsplit

from .errors import ConnectionFailedError, SanboxError, error_from_code, error_from_response

MAX_MESSAGE = 16 * 2**20
"""Bytes of one WebSocket message a client takes from the server; past it the connection is
closed (1009). The most the server sends in one is far less: a guest's output chunk (256 KiB of
payload at most, `guest.protocol.MAX_PAYLOAD`, ~350 KiB as base64 in JSON) or one read of an SSH
stream. Without a bound, a broken or hostile server could make the client hold any amount."""


class WebSocketClosedError(SanboxError):
    """The peer closed the WebSocket; `close_code` says how (1000: normally, 1006: the connection
    dropped without a close)."""

    def __init__(self, message: str, *, close_code: int = 1006) -> None:
        super().__init__(message, code="closed")
        self.close_code = close_code


def _closed(exc: Exception) -> WebSocketClosedError:
    """The close the server sent, else the one this side sent (1009: a message over
    `MAX_MESSAGE`), else a dropped connection (1006)."""
    frame = getattr(exc, "rcvd", None) or getattr(exc, "sent", None)
    code = frame.code if frame is not None else 1006
    return WebSocketClosedError(f"websocket closed ({code})", close_code=code)


class WebSocketLike(Protocol):
    async def send(self, message: str) -> None: ...

    async def recv(self) -> str: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def recv_message(self) -> str | bytes:
        """The next message as it came: text as `str`, binary as `bytes`."""
        ...


WebSocketConnector = Callable[[str, dict[str, str]], AbstractAsyncContextManager[WebSocketLike]]


async def _refusal(ws: WebSocketLike) -> SanboxError | None:
    """The `{"type": "error"}` message a closed WebSocket still holds unread, as its error."""
    try:
        body = json.loads(await ws.recv())
    except (WebSocketClosedError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("type") != "error":
        return None
    return error_from_code(str(body.get("code")), str(body.get("message", "")))


def websocket_url(base: str, path: str) -> str:
    """The WebSocket URL of the API's `path` on the server at `base` (http -> ws, https -> wss)."""
    return base.replace("https://", "wss://", 1).replace("http://", "ws://", 1) + path


class _Websockets:
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def send(self, message: str) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._connection.send(message)
        except ConnectionClosed as exc:
            raise _closed(exc) from exc

    async def recv(self) -> str:
        message = await self.recv_message()
        return message if isinstance(message, str) else message.decode("utf-8", "replace")

    async def send_bytes(self, data: bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._connection.send(data)
        except ConnectionClosed as exc:
            raise _closed(exc) from exc

    async def recv_message(self) -> str | bytes:
        from websockets.exceptions import ConnectionClosed

        try:
            message: str | bytes = await self._connection.recv()
        except ConnectionClosed as exc:
            raise _closed(exc) from exc
        return message


@asynccontextmanager
async def websockets_connector(url: str, headers: dict[str, str]) -> AsyncIterator[WebSocketLike]:
    """Connect with the `websockets` library, mapping handshake failures to `SanboxError`s."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus, WebSocketException

    try:
        connection = await connect(url, additional_headers=headers, max_size=MAX_MESSAGE)
    except InvalidStatus as exc:
        response = exc.response
        raise error_from_response(response.status_code, bytes(response.body or b"")) from exc
    except (OSError, WebSocketException) as exc:
        raise ConnectionFailedError(
            f"cannot reach {url}: is `sanbox server` running? ({exc})", code="connection_failed"
        ) from exc
    try:
        yield _Websockets(connection)
    finally:
        await connection.close()


class _AsgiWebSocket:
    """One WebSocket session with an ASGI app run as a task on the current loop."""

    def __init__(self, app: Any, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self._scope = {
            "type": "websocket",
            "asgi": {"version": "3.0"},
            "scheme": "wss" if parts.scheme == "wss" else "ws",
            "path": parts.path,
            "raw_path": parts.path.encode(),
            "root_path": "",
            "query_string": parts.query.encode(),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
            + [(b"host", (parts.netloc or "testserver").encode())],
            "client": ("127.0.0.1", 50000),
            "server": (parts.hostname or "testserver", parts.port or 80),
            "subprotocols": [],
            "extensions": {},
        }
        self._app = app
        self._to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._to_app.put_nowait({"type": "websocket.connect"})
        self._task = asyncio.create_task(self._run())
        first = await self._from_app.get()
        if first["type"] != "websocket.accept":
            raise error_from_code("forbidden", "websocket rejected by the server", 403)

    async def _run(self) -> None:
        try:
            await self._app(self._scope, self._to_app.get, self._from_app.put)
        finally:
            self._from_app.put_nowait({"type": "websocket.close", "code": 1006})

    async def send(self, message: str) -> None:
        self._to_app.put_nowait({"type": "websocket.receive", "text": message})

    async def recv(self) -> str:
        message = await self.recv_message()
        return message if isinstance(message, str) else message.decode("utf-8", "replace")

    async def send_bytes(self, data: bytes) -> None:
        self._to_app.put_nowait({"type": "websocket.receive", "bytes": bytes(data)})

    async def recv_message(self) -> str | bytes:
        message = await self._from_app.get()
        if message["type"] == "websocket.send":
            text = message.get("text")
            return text if text is not None else bytes(message.get("bytes") or b"")
        self._from_app.put_nowait(message)  # stay closed for later calls
        code = int(message.get("code", 1000))
        raise WebSocketClosedError(f"websocket closed ({code})", close_code=code)

    async def close(self) -> None:
        self._to_app.put_nowait({"type": "websocket.disconnect", "code": 1000})
        if self._task is not None:
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(self._task)
            except (TimeoutError, Exception):
                self._task.cancel()
                cancelled = None  # as the server's tasks.cancel_and_wait: the caller's own
                while not self._task.done():  # cancel is raised once the app's task ended
                    try:
                        await asyncio.wait({self._task})
                    except asyncio.CancelledError as exc:
                        cancelled = exc
                if cancelled is not None:
                    raise cancelled from None
                if not self._task.cancelled():
                    self._task.exception()  # retrieved: the app's error is not the close's


def asgi_connector(app: Any) -> WebSocketConnector:
    """A connector that talks to `app` in-process instead of over a socket."""

    @asynccontextmanager
    async def connect(url: str, headers: dict[str, str]) -> AsyncIterator[WebSocketLike]:
        session = _AsgiWebSocket(app, url, headers)
        try:
            await session.open()
            yield session
        finally:
            await session.close()

    return connect


class WebSocketSession:
    """One WebSocket to the API used with `async with` (an exec stream, an SSH connection):
    connected on entry, then `opened()` (e.g. send the request), closed on exit."""

    what = "the WebSocket"

    def __init__(self, connector: WebSocketConnector, url: str, headers: dict[str, str]) -> None:
        self._connector = connector
        self._url = url
        self._headers = headers
        self._context: AbstractAsyncContextManager[WebSocketLike] | None = None
        self._ws: WebSocketLike | None = None

    async def opened(self, ws: WebSocketLike) -> None:
        """What to do once connected; a failure here closes the connection again."""

    @staticmethod
    async def send_first(ws: WebSocketLike, message: str) -> None:
        """Send the session's first message. A server that refused the session (a bad key, an
        unknown computer) may have sent its error and closed before this is sent: raise that
        error, not the bare close it leaves."""
        try:
            await ws.send(message)
        except WebSocketClosedError as closed:
            refusal = await _refusal(ws)
            if refusal is not None:
                raise refusal from None
            raise closed

    async def __aenter__(self) -> Self:
        self._context = self._connector(self._url, self._headers)
        self._ws = await self._context.__aenter__()
        try:
            await self.opened(self._ws)
        except BaseException as exc:
            await self._context.__aexit__(type(exc), exc, exc.__traceback__)
            self._context = self._ws = None
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

    def _connected(self) -> WebSocketLike:
        if self._ws is None:
            raise RuntimeError(f"use {self.what} inside `async with` (or `with`)")
        return self._ws
