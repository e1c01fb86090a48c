"""What of a port's answer to a DevTools discovery request the host passes on: sans-IO checks on
the answer's status, head and body (the relay that holds it: `devtools.py`).

A CDP client takes the `webSocketDebuggerUrl` of a discovery answer it could parse as JSON and
sends that WebSocket the headers it was given, the caller's key among them. So:

- a redirect (3xx with `Location`: Playwright follows it with the headers) is refused, and so is
  a `Content-Encoding` other than identity (a compressed body would hide its URLs from the check,
  and a client may decompress it);
- a body that some client could read as a JSON object or array (`json_shaped`) must be JSON (at
  most `MAX_ANSWER` bytes, `MAX_CONTAINERS` objects and arrays, `MAX_DEPTH` deep, no number out
  of range) and goes on as the host serializes it (`checked_body`), every
  `webSocketDebuggerUrl` on the caller's own origin (else refused) and every DevTools frontend
  URL the same (else left out), so no client parses anything the host did not. A body that
  starts with `{` or `[` but is not JSON (NDJSON, a truncated answer) is refused, not passed on:
  a lenient client may parse a prefix of it;
- any other body goes on unchanged, head and all: no client can take an object, so no URL, from
  it. "Could read" covers how clients decode: Node's `Buffer.toString` and `JSON.parse`
  (Playwright, chrome-remote-interface) reject a leading BOM, but WHATWG `fetch().json()`
  (Puppeteer's `browserURL`) strips a UTF-8 one, Python's `json.loads` of bytes takes a UTF-8,
  UTF-16 or UTF-32 body with or without a BOM, and `requests` decodes by the `charset` the
  answer declares (UTF-7's `+AHs-` is `{`). So a body counts as JSON-shaped when its first
  character that is not whitespace, a BOM or NUL is `{` or `[` as UTF-8, as Python's JSON
  detection decodes it, or in any charset its `Content-Type`s declare: a BOM-prefixed or UTF-16
  JSON body is checked (and goes on as UTF-8), never passed on unread. (Clients parse JSON as
  JSON: one that took JSON5's comments or YAML from a discovery answer is not provided for.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Headers = list[tuple[bytes, bytes]]

MAX_ANSWER = 256 * 1024  # Chromium's /json/list: ~600 bytes a target
MAX_CONTAINERS = 10_000  # objects and arrays: Chromium's answers have one a target
MAX_DEPTH = 32  # Chromium's answers are 2 deep
MAX_CHARSETS = 4  # distinct charsets in its Content-Types: Chromium's answer declares one
SOCKET_KEY = "webSocketDebuggerUrl"
FRONTEND_KEYS = ("devtoolsFrontendUrl", "devtoolsFrontendUrlCompat")
JSON_TYPE = b"application/json; charset=utf-8"
_DEVTOOLS_PATH = re.compile(r"/devtools/[A-Za-z0-9_.~/-]{1,256}")
_JSON_START = re.compile(r"[\s\ufeff\x00]*[\[{]")
_CHARSET = re.compile(rb";\s*charset\s*=\s*\"?([^\";\s]{1,64})", re.IGNORECASE)
_UTF8 = frozenset(b"utf-8 utf8".split())
_REPLACED = frozenset(b"content-length content-type location".split())


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


def _values(head: Headers, name: bytes) -> list[bytes]:
    return [value for key, value in head if key.lower() == name]


def _charsets(head: Headers) -> list[str]:
    types = _values(head, b"content-type")
    return [m.group(1).decode("latin-1") for t in types if (m := _CHARSET.search(t))]


def _readings(body: bytes, charsets: list[str]) -> Iterator[str]:
    """`body` as clients may decode it: UTF-8, as JSON's detection does, in each charset."""
    for encoding in ("utf-8", json.detect_encoding(body), *charsets):
        try:
            yield body.decode(encoding, "replace")
        except (LookupError, ValueError):  # no codec, or none for text: a client falls back
            continue


def json_shaped(body: bytes, head: Headers) -> bool:
    """Whether some client could read `body` as a JSON object or array (module docstring); a
    head declaring more than `MAX_CHARSETS` charsets is not read so many times: its body is."""
    charsets = list(dict.fromkeys(c.lower() for c in _charsets(head)))
    if len(charsets) > MAX_CHARSETS:
        return True
    return any(_JSON_START.match(text) for text in _readings(body, charsets))


def _containers(document: Any) -> Iterator[dict[str, Any]]:
    """Every object in `document`, outermost first; DevToolsAnswerError past `MAX_DEPTH`."""
    stack: list[tuple[Any, int]] = [(document, 0)] if isinstance(document, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise DevToolsAnswerError(f"it is nested more than {MAX_DEPTH} deep")
        if isinstance(node, dict):
            yield node
        children = node.values() if isinstance(node, dict) else node
        stack += [(child, depth + 1) for child in children if isinstance(child, dict | list)]


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is no JSON")


def checked_body(body: bytes, caller: Caller) -> bytes:
    """A JSON-shaped body as the host passes it on: its JSON with every DevTools URL on the
    caller's origin, serialized anew (UTF-8); DevToolsAnswerError if it is not JSON, is too big,
    or names a WebSocket elsewhere. CPU-bound (milliseconds at its bounds): run it off the loop."""
    if len(body) > MAX_ANSWER:
        raise DevToolsAnswerError(f"it is larger than {MAX_ANSWER // 1024} KiB")
    # every `{` and `[` of the JSON is such a byte in each encoding json.loads takes: counted
    # before parsing, the parse never builds more containers than the bound
    if body.count(b"{") + body.count(b"[") > MAX_CONTAINERS:
        raise DevToolsAnswerError(f"it has more than {MAX_CONTAINERS} objects and arrays")
    try:
        document = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise DevToolsAnswerError("it starts as JSON but is not JSON") from None
    for node in _containers(document):
        if SOCKET_KEY in node:
            node[SOCKET_KEY] = socket_url(node[SOCKET_KEY], caller)
        for key in FRONTEND_KEYS:
            if key in node and (url := frontend_url(node[key], caller)) is None:
                del node[key]
            elif key in node:
                node[key] = url
    try:
        return json.dumps(document, ensure_ascii=False, allow_nan=False).encode()
    except ValueError:  # 1e400 parses as inf, which is no JSON
        raise DevToolsAnswerError("a number in it is out of range") from None


def head_refusal(status: int, head: Headers) -> str | None:
    """Why an answer with this status and head is refused whatever its body, or None."""
    if 300 <= status < 400 and _values(head, b"location"):
        return f"it is a redirect, {status}, which a client follows with its headers"
    encodings = [
        e.strip().lower() for v in _values(head, b"content-encoding") for e in v.split(b",")
    ]
    if any(encoding not in (b"", b"identity") for encoding in encodings):
        return "it is encoded (Content-Encoding), which the host does not check"
    return None


def _json_type(head: Headers) -> bytes:
    """The guest's Content-Type if it is one JSON type in UTF-8, else `JSON_TYPE`."""
    types = _values(head, b"content-type")
    media = types[0].partition(b";")[0].strip().lower() if len(types) == 1 else b""
    json_media = media == b"application/json" or media.endswith(b"+json")
    charsets = [c.lower().encode() for c in _charsets(head)]
    return types[0] if json_media and all(c in _UTF8 for c in charsets) else JSON_TYPE


def checked_answer(
    status: int, head: Headers, body: bytes, caller: Caller
) -> tuple[Headers, bytes]:
    """The head and body the host sends for the guest's complete answer; DevToolsAnswerError
    if it is refused (module docstring)."""
    if (why := head_refusal(status, head)) is not None:
        raise DevToolsAnswerError(why)
    if not json_shaped(body, head):
        return head, body
    checked = checked_body(body, caller)
    kept = [(k, v) for k, v in head if k.lower() not in _REPLACED]
    return kept + [
        (b"content-type", _json_type(head)),
        (b"content-length", str(len(checked)).encode()),
    ], checked
