"""A client sending a huge body: refused with 413 before any route holds it, whether it declares
its length or streams it chunked; uploads stream through untouched."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from sanbox.api.limits import BodyLimit

pytestmark = pytest.mark.unit

LIMIT = 1000


class Echo:
    """A route that reads its whole body and answers with its size."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.called = True
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.dumps({"size": size}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def call(
    chunks: list[bytes],
    *,
    length: int | None = None,
    method: str = "POST",
    path: str = "/v1/computers/a/exec",
) -> tuple[int, dict[str, Any], Echo, int]:
    """Run one request through the middleware; returns status, JSON body, the app, chunks read."""
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    messages: list[Message] = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if read < len(messages):
            read += 1
            return messages[read - 1]
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    app = Echo()
    asyncio.run(BodyLimit(app, limit=LIMIT)(scope, receive, send))
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(body), app, read


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    status, body, app, read = call([b"x" * 10], length=LIMIT + 1)
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert not app.called and read == 0


def test_a_chunked_body_is_counted_and_refused_once_over() -> None:
    status, body, app, read = call([b"x" * 400] * 100)
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert not app.called and read == 3  # stopped at the first chunk past the limit


def test_bodies_within_the_limit_reach_the_route_whole() -> None:
    assert call([b"x" * 400, b"y" * 600])[:2] == (200, {"size": LIMIT})
    assert call([b"x" * LIMIT], length=LIMIT)[:2] == (200, {"size": LIMIT})
    assert call([b""], method="GET", path="/v1/computers")[:2] == (200, {"size": 0})


def test_file_uploads_are_not_limited_here() -> None:
    status, body, _, _ = call(
        [b"z" * 400] * 100, length=40_000, method="PUT", path="/v1/computers/a/files"
    )
    assert (status, body) == (200, {"size": 40_000})
    # only the upload itself: other file routes are ordinary JSON routes
    status, _, _, _ = call([b"z" * 2000], method="POST", path="/v1/computers/a/files/mkdir")
    assert status == 413
