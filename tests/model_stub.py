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
from typing import Any

MAX_BODY = 8 << 20  # bytes of one request body read; a bigger one is refused
MODEL = "stub-model"


async def read_body(reader: asyncio.StreamReader, headers: list[list[str]]) -> bytes:
    """A request body framed by Content-Length or chunked, at most MAX_BODY bytes."""
    fields = {k.lower(): v for k, v in headers}
    if fields.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return body
            if len(body) + size > MAX_BODY:
                raise ValueError("request body too large")
            body += (await reader.readexactly(size + 2))[:-2]
    length = int(fields.get("content-length", "0") or 0)
    if length > MAX_BODY:
        raise ValueError("request body too large")
    return await reader.readexactly(length)


def completion(reply: str) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 1_700_000_000,
            "model": MODEL, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}}  # fmt: skip


def stream(reply: str) -> bytes:
    """The same answer as SSE chunks: role, content, finish, usage, [DONE]."""
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": MODEL}  # fmt: skip
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                              "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {"content": reply}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [],
         "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}},
    ]  # fmt: skip
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
        listing = {"object": "list", "data": [{"id": MODEL, "object": "model",
                                               "created": 0, "owned_by": "test"}]}  # fmt: skip
        return b"200 OK", b"application/json", json.dumps(listing).encode()
    error = {"error": {"message": f"no route {method} {route}", "type": "not_found"}}
    return b"404 Not Found", b"application/json", json.dumps(error).encode()


def model_handler(log: Path, reply: str) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = (lines[0].split(" ") + ["", ""])[:2]
                headers = [[k.strip(), v.strip()] for k, _, v in
                           (h.partition(":") for h in lines[1:] if h)]  # fmt: skip
                body = await read_body(reader, headers)
                with log.open("a") as f:
                    f.write(json.dumps({"method": method, "path": path, "headers": headers,
                                        "body_bytes": len(body)}) + "\n")  # fmt: skip
                status, kind, data = answer(method, path, body, reply)
                close = any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind + b"\r\n"
                             + b"Content-Length: %d\r\n" % len(data)
                             + (b"Connection: close\r\n" if close else b"") + b"\r\n"
                             + data)  # fmt: skip
                await writer.drain()
                if close:
                    return
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ssl.SSLError,
                ValueError):  # fmt: skip
            pass
        finally:
            writer.close()

    return handle
