"""Request bodies are bounded before a route reads them.

``BodyLimit`` answers 413 ``payload_too_large`` for a body over its limit: by the Content-Length
header up front, or, for a body without one (chunked), by counting while reading it (at most the
limit is held, then handed to the route as if just received). Exempt:

- file uploads (``PUT /v1/computers/{ref}/files``): they stream to the guest under the agent's
  flow control, so the server holds a window's worth at a time whatever the size; the guest's
  disk bounds them;
- template builds (``POST /v1/templates``): the route bounds the context itself (64 MiB);
- WebSockets (their messages are bounded by the server's WebSocket frame limit);
- published-port requests, which the ``PublishedPorts`` middleware relays before this one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response

MIB = 1024 * 1024
_UPLOAD = re.compile(r"/(?:v1|console)/computers/[^/]+/files")  # the console's uploads too


def is_upload(scope: Scope) -> bool:
    if scope["method"] == "POST" and scope["path"] in ("/v1/templates", "/console/templates"):
        return True
    return scope["method"] == "PUT" and _UPLOAD.fullmatch(scope["path"]) is not None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    def __init__(
        self, app: ASGIApp, limit: int = MIB, exempt: Callable[[Scope], bool] = is_upload
    ) -> None:
        self.app = app
        self.limit = limit
        self._exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._exempt(scope):
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None:  # the HTTP server holds the body to its declared length
            if length > self.limit:
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        body: list[Message] = []
        size = 0
        while True:
            message = await receive()
            body.append(message)
            if message["type"] != "http.request":
                break  # the client went away: the route sees it as it would have
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return body.pop(0) if body else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, "payload_too_large", f"the request body is larger than {self.limit} bytes"
        )
        await response(scope, receive, send)
