"""One SSH connection's bytes over the WebSocket `/v1/computers/{id}/ssh`: what an OpenSSH client
would send to the computer's sshd goes in with `send`, what sshd answers comes out of `recv`.
`sanbox ssh-proxy` is this stream between stdin and stdout (OpenSSH's `ProxyCommand`)."""

from __future__ import annotations

import json

from ._websocket import WebSocketClosedError, WebSocketSession
from .errors import SanboxError, error_from_code

NORMAL_CLOSE = (1000, 1001)


class AsyncSshStream(WebSocketSession):
    """Use as `async with computer.ssh_stream() as stream: await stream.send(...)`."""

    what = "the SSH stream"

    async def send(self, data: bytes) -> None:
        if data:
            await self._connected().send_bytes(data)

    async def send_eof(self) -> None:
        """Nothing more will be sent; what sshd still answers can be read."""
        await self._connected().send(json.dumps({"type": "eof"}))

    async def recv(self) -> bytes:
        """The next bytes from sshd; `b""` once the connection ended normally. An error the server
        reports (the computer is unknown or stopped, the key is refused) raises its `SanboxError`;
        a connection that dropped raises `SanboxError` with code `stream_closed`."""
        ws = self._connected()
        while True:
            try:
                message = await ws.recv_message()
            except WebSocketClosedError as exc:
                if exc.close_code in NORMAL_CLOSE:
                    return b""
                raise SanboxError(
                    f"the SSH connection to the server dropped ({exc.close_code})",
                    code="stream_closed",
                ) from None
            if isinstance(message, bytes):
                if message:
                    return message
                continue
            body = json.loads(message)
            if isinstance(body, dict) and body.get("type") == "error":
                raise error_from_code(body.get("code"), str(body.get("message", "")))
