"""A port's answer to a DevTools discovery request, passed on only as the host checked it.

A CDP client (Playwright's `connect_over_cdp`, Puppeteer's `browserURL`, chrome-remote-interface)
first asks the port for `/json/version` (or `/json`, `/json/list`, `/json/new`), then opens the
WebSocket that answer names, sending it the headers it was given: a Sanbox key in its
`Authorization` goes wherever the answer points (Playwright follows a redirect with them too).
The guest writes that answer, and a guest is hostile (root in it, or any process that takes the
port), so the relay holds the answer to such a request and sends on what it made of it:

- a redirect is refused;
- a body, if there is one, must be JSON (at most `MAX_ANSWER` bytes, nested at most `MAX_DEPTH`
  deep) and goes on as the host serializes it, so no client parses anything the host did not;
- every `webSocketDebuggerUrl` in it becomes `ws(s)://<the Host the caller used><path>`, its path
  kept only if it is a `/devtools/...` path, else the answer is refused; a
  `devtoolsFrontendUrl` (`devtoolsFrontendUrlCompat`) becomes that origin's `/devtools/...` page
  with `ws=` (`wss=`) the same, or is left out (a page for people, not a place a client connects).
Refused: 502 `devtools_answer_refused`. The host cannot know which port serves DevTools (the
browser type's 9223, a Chromium any computer runs on any port: the guest decides what listens,
the caller where a client points), so every port's requests whose path ends in one of those four
(a client appends them to the endpoint URL's path) are answered so: a guest's own API at such a
path may answer JSON only. The request goes without `Accept-Encoding`, so the answer is plain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from starlette.types import Message, Receive, Scope, Send

from ..forwarded import forwarded_proto
from .relay import ByteStream, relay_http, send_error

MAX_ANSWER = 1024 * 1024  # Chromium's /json/list: ~600 bytes a target
MAX_DEPTH = 32  # Chromium's answers are 2 deep
CODE = "devtools_answer_refused"
SOCKET_KEY = "webSocketDebuggerUrl"
FRONTEND_KEYS = ("devtoolsFrontendUrl", "devtoolsFrontendUrlCompat")
_DISCOVERY = re.compile(r".*/json(?:/(?:version|list|new))?/?", re.IGNORECASE | re.DOTALL)
_DEVTOOLS_PATH = re.compile(r"/devtools/[A-Za-z0-9_.~/-]{1,256}")
_HOST = re.compile(r"[a-z0-9.-]{1,253}(?::[0-9]{1,5})?")
_REPLACED = frozenset(b"content-length content-type content-encoding location".split())


class DevToolsAnswerError(ValueError):
    """A discovery answer the host will not pass on; the message says why, for the caller."""


@dataclass(frozen=True)
class Caller:
    """Where the caller reached the port: its scheme and the Host it sent."""

    secure: bool
    host: str

    def url(self, path: str, websocket: bool = False) -> str:
        scheme = ("ws" if websocket else "http") + ("s" if self.secure else "")
        return f"{scheme}://{self.host}{path}"


def discovery_request(scope: Scope) -> bool:
    """Whether an HTTP request asks what a DevTools client would connect to."""
    return (
        scope["type"] == "http" and _DISCOVERY.fullmatch(str(scope.get("path") or "")) is not None
    )


def caller_of(scope: Scope) -> Caller | None:
    """The caller's origin, if its Host is one a URL can be made on (a port's host always is)."""
    host = next((v for k, v in scope.get("headers") or [] if k.lower() == b"host"), b"")
    name = host.decode("latin-1").strip().lower()
    if _HOST.fullmatch(name) is None:
        return None
    return Caller(forwarded_proto(scope) == "https", name)


def _devtools_path(path: str) -> str | None:
    return path if _DEVTOOLS_PATH.fullmatch(path) else None


def socket_url(value: object, caller: Caller) -> str:
    """A `webSocketDebuggerUrl` on the caller's origin; DevToolsAnswerError if it is no
    `ws(s)://HOST/devtools/...` URL."""
    try:
        parts = urlsplit(value) if isinstance(value, str) else None
    except ValueError:
        parts = None
    path = _devtools_path(parts.path) if parts and parts.scheme.lower() in ("ws", "wss") else None
    if parts is None or not parts.netloc or path is None:
        raise DevToolsAnswerError(f"its {SOCKET_KEY} is no ws://HOST/devtools/... URL")
    return caller.url(path, websocket=True)


def frontend_url(value: object, caller: Caller) -> str | None:
    """A DevTools frontend URL on the caller's origin, its `ws=` too; None if it is not one."""
    try:
        parts = urlsplit(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if parts is None or _devtools_path(parts.path) is None:
        return None
    sockets = [v for k, v in parse_qsl(parts.query) if k.lower() in ("ws", "wss")]
    path = _devtools_path("/" + sockets[0].partition("/")[2]) if sockets else None
    if path is None:
        return None
    param = "wss" if caller.secure else "ws"
    return caller.url(f"{parts.path}?{param}={caller.host}{path}")


def _containers(document: Any) -> Iterator[dict[str, Any]]:
    """Every object in `document`, outermost first; DevToolsAnswerError past `MAX_DEPTH`."""
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth >= MAX_DEPTH:
            raise DevToolsAnswerError(f"it is nested more than {MAX_DEPTH} deep")
        if isinstance(node, dict):
            yield node
        stack += [
            (child, depth + 1) for child in (node.values() if isinstance(node, dict) else node)
        ]


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is no JSON")


def checked_body(body: bytes, caller: Caller) -> bytes:
    """The answer's body as the host passes it on: its JSON with every DevTools URL on the
    caller's origin, serialized anew; DevToolsAnswerError if it is not JSON or names a WebSocket
    elsewhere."""
    if len(body) > MAX_ANSWER:
        raise DevToolsAnswerError(f"it is larger than {MAX_ANSWER // 1024} KiB")
    try:
        document = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise DevToolsAnswerError("it is not JSON") from None
    for node in _containers(document):
        if SOCKET_KEY in node:
            node[SOCKET_KEY] = socket_url(node[SOCKET_KEY], caller)
        for key in FRONTEND_KEYS:
            if key in node and (url := frontend_url(node[key], caller)) is None:
                del node[key]
            elif key in node:
                node[key] = url
    return json.dumps(document, ensure_ascii=False).encode()


class _Held:
    """The guest's answer as `relay_http` sends it, held: its head, and its body up to
    `MAX_ANSWER` (past it, a raise ends the relay's download)."""

    def __init__(self) -> None:
        self.start: Message | None = None
        self.body = bytearray()
        self.complete = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")
            if len(self.body) > MAX_ANSWER:
                raise DevToolsAnswerError(f"it is larger than {MAX_ANSWER // 1024} KiB")
            self.complete = not message.get("more_body", False)


async def _refuse(send: Send, path: str, why: str) -> None:
    message = (
        f"this port's answer to a DevTools discovery request ({path[:80]}) is not relayed ({why}): "
        "a CDP client would send the headers it was given, your key among them, where such an "
        "answer points. Something in the computer answered so: see what listens on this port there "
        "(the browser type's DevTools front is its `cdp` service)"
    )
    await send_error(send, 502, CODE, message)


async def relay_discovery(
    scope: Scope, receive: Receive, send: Send, stream: ByteStream, *, host_header: str
) -> None:
    """`relay_http` of a discovery request (`discovery_request`), its answer checked."""
    path = str(scope.get("path") or "")
    caller = caller_of(scope)
    if caller is None:
        await _refuse(send, path, "the request's Host is no port's")
        return
    headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"accept-encoding"]
    held = _Held()
    await relay_http(
        {**scope, "headers": headers}, receive, held.send, stream, host_header=host_header
    )
    if held.start is None:  # the client left before anything was sent
        return
    status, head = held.start["status"], list(held.start.get("headers") or [])
    if not held.complete:
        await _refuse(send, path, f"it broke off, or is larger than {MAX_ANSWER // 1024} KiB")
        return
    if 300 <= status < 400:
        await _refuse(
            send, path, f"it is a redirect, {status}, which a client follows with its headers"
        )
        return
    body = bytes(held.body)
    if body:
        try:
            body = checked_body(body, caller)
        except DevToolsAnswerError as exc:
            await _refuse(send, path, str(exc))
            return
        head = [(k, v) for k, v in head if k.lower() not in _REPLACED]
        head += [(b"content-type", b"application/json; charset=utf-8")]
        head += [(b"content-length", str(len(body)).encode())]
    else:
        head = [(k, v) for k, v in head if k.lower() != b"location"]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def relay_port_http(
    scope: Scope, receive: Receive, send: Send, stream: ByteStream, *, host_header: str
) -> None:
    """One HTTP request to a port: `relay_http`, or `relay_discovery` for a discovery request."""
    relay = relay_discovery if discovery_request(scope) else relay_http
    await relay(scope, receive, send, stream, host_header=host_header)
