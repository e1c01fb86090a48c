"""model.test's server (run by internet_server.py in the test internet's namespace): an
OpenAI-compatible stub. `POST .../chat/completions` answers one fixed chat.completion (a stream of
SSE chunks when the body asks `"stream": true`), `GET .../models` lists `stub-model`, anything else
is a 404. Each request is logged whole on the host, Authorization header included, so a test can
check which key arrived (the guest only ever holds a placeholder)."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads tests/ as the package it is; this runs with tests/ on sys.path
    from tests.stub_http import next_request
else:
    from stub_http import next_request

MODEL = "stub-model"


def completion(reply: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": reply},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
    }


def stream(reply: str) -> bytes:
    """The same answer as SSE chunks: role, content, finish, usage, [DONE]."""
    base = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
    }
    chunks = [
        {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ],
        },
        {**base, "choices": [{"index": 0, "delta": {"content": reply}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
        },
    ]
    events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


def answer(method: str, path: str, body: bytes, reply: str) -> tuple[bytes, bytes, bytes]:
    """Status, content type and body for one request."""
    route = path.split("?", 1)[0].rstrip("/")
    if method == "POST" and route.endswith("/chat/completions"):
        try:
            asked = json.loads(body or b"{}")
        except ValueError:
            asked = {}
        if isinstance(asked, dict) and asked.get("stream") is True:
            return b"200 OK", b"text/event-stream", stream(reply)
        return b"200 OK", b"application/json", json.dumps(completion(reply)).encode()
    if method == "GET" and route.endswith("/models"):
        listing = {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "test"}],
        }
        return b"200 OK", b"application/json", json.dumps(listing).encode()
    error = {"error": {"message": f"no route {method} {route}", "type": "not_found"}}
    return b"404 Not Found", b"application/json", json.dumps(error).encode()


def model_handler(log: Path, reply: str) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await next_request(reader, log)) is not None:
                status, kind, data = answer(request.method, request.path, request.body, reply)
                close = request.closes
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: "
                    + kind
                    + b"\r\n"
                    + b"Content-Length: %d\r\n" % len(data)
                    + (b"Connection: close\r\n" if close else b"")
                    + b"\r\n"
                    + data
                )
                await writer.drain()
                if close:
                    return
        except (
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ssl.SSLError,
            ValueError,
        ):
            pass
        finally:
            writer.close()

    return handle
