"""The one request a computer's plain-HTTP connection may carry through the egress proxy, checked
before anything is relayed (sans-IO: bytes in, events out).

The head is read raw first and refused in every shape that lets two parsers disagree about where
a request ends or where it goes (request smuggling): Transfer-Encoding with Content-Length, several
or comma-joined Content-Length values, a Transfer-Encoding other than `chunked`, obsolete line
folding, a bare CR or LF, several Host headers, a Host that differs from an absolute-form target's
authority. CONNECT is refused (nothing is tunnelled by name here). Then h11 parses the same bytes,
and the request goes upstream written again from h11's parse (`head_bytes`, `body_bytes`), so
the upstream sees exactly one request, framed as it was checked.

One request per connection: the bytes a guest sends after it (a keep-alive or pipelined second
request, whatever its Host) are never relayed; the answer says `Connection: close`, and a client
asks again on a new connection, which is checked on its own. An `Upgrade` request (WebSocket) that
the upstream answers with 101 becomes a raw relay after that checked request."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

import h11

from .sniff import (
    ABSOLUTE_TARGET,
    INCOMPLETE,
    REQUEST_LINE,
    TOKEN,
    Incomplete,
    NotHttp,
    looks_like_request_start,
    split_authority,
)

MAX_HEAD = 64 * 1024  # request and response heads; bodies stream and are never held whole
HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection"}
# an upgrade to anything but WebSocket (h2c: its HTTP/2 streams would each name a host, unchecked)
# is not asked of the upstream: the request goes as HTTP/1.1 (as Java's HttpClient or `curl
# --http2` expect when the server does not switch)
NOT_UPGRADING = {b"upgrade", b"http2-settings"}


@dataclass(frozen=True)
class Refusal:
    """Answer the guest with `status` (and `reason` in the body) and close."""

    status: int
    reason: str


@dataclass(frozen=True)
class RequestHead:
    name: str  # the host the request asks for (lowercase, no port)
    method: bytes
    upgrade: bool  # it asks to switch protocols to WebSocket (another upgrade is not relayed)


def header_fields(lines: list[bytes]) -> list[tuple[bytes, bytes]] | str:
    """Each header line of a head (its start line taken off) as (name as sent, value without
    surrounding blanks), or what is wrong with one: obsolete line folding, or no colon after a
    token. One rule for a request's head and an answer's."""
    fields = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            return "obsolete line folding"
        name, colon, value = line.partition(b":")
        if not colon or not TOKEN.fullmatch(name):
            return "a malformed header line"
        fields.append((name, value.strip(b" \t")))
    return fields


def bare(head: bytes, complete: bool = True) -> bool:
    """Whether `head` has a CR or LF outside a CRLF (a trailing CR may still get its LF)."""
    rest = head.replace(b"\r\n", b"")
    return b"\n" in rest or b"\r" in (rest if complete else rest[:-1])


def check_head(buf: bytes) -> RequestHead | Refusal | Incomplete:
    """The request head at the start of `buf`, checked (INCOMPLETE: read more)."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD)
    if end < 0:
        if len(buf) >= MAX_HEAD:
            return Refusal(431, f"the request head is over {MAX_HEAD // 1024} KiB")
        if bare(buf, complete=False):
            return Refusal(400, "a bare CR or LF in the request head")
        if not looks_like_request_start(buf):
            return Refusal(400, "not an HTTP/1.x request")
        return INCOMPLETE
    head = buf[:end]
    if bare(head):
        return Refusal(400, "a bare CR or LF in the request head")
    request_line, *lines = head.split(b"\r\n")
    match = REQUEST_LINE.fullmatch(request_line)
    if match is None:
        return Refusal(400, "not an HTTP/1.x request")
    method, target = match.group(1), match.group(2)
    if method == b"CONNECT":
        return Refusal(405, "CONNECT is not relayed: dial the host itself, through 443 or 80")
    parsed = header_fields(lines)
    if isinstance(parsed, str):
        return Refusal(400, f"{parsed} in the request head")
    fields: dict[bytes, list[bytes]] = {}
    for name, value in parsed:
        fields.setdefault(name.lower(), []).append(value)
    framing = _framing_refusal(fields)
    if framing is not None:
        return framing
    upgrades = [t.strip().lower() for v in fields.get(b"upgrade", []) for t in v.split(b",")]
    websocket = bool(upgrades) and all(t == b"websocket" for t in upgrades)
    hosts = fields.get(b"host", [])
    if len(hosts) > 1:
        return Refusal(400, "several Host headers")
    host = split_authority(hosts[0].decode("latin-1")) if hosts else None
    absolute = ABSOLUTE_TARGET.match(target)
    if absolute is not None:
        target_host = split_authority(absolute.group(1).decode("latin-1"))
        if hosts and target_host != host:
            return Refusal(400, "the Host header and the request target name different hosts")
        host = target_host
    if isinstance(host, NotHttp):
        return Refusal(400, "a malformed Host")
    if not host:
        return Refusal(400, "HTTP without a Host header: the destination cannot be named")
    return RequestHead(host, method, websocket)


def _framing_refusal(fields: dict[bytes, list[bytes]]) -> Refusal | None:
    lengths = fields.get(b"content-length", [])
    codings = fields.get(b"transfer-encoding", [])
    if lengths and codings:
        return Refusal(400, "Transfer-Encoding together with Content-Length")
    if len(lengths) > 1 or any(b"," in v for v in lengths):
        return Refusal(400, "several Content-Length values")
    if lengths and not lengths[0].isdigit():
        return Refusal(400, "a malformed Content-Length")
    if len(codings) > 1 or (codings and codings[0].lower() != b"chunked"):
        return Refusal(501, "a Transfer-Encoding other than chunked")
    return None


@dataclass(frozen=True)
class Accepted:
    head: RequestHead
    request: h11.Request


GuestEvent = Refusal | Accepted | h11.Data | h11.EndOfMessage | h11.ConnectionClosed


class GuestRequest:
    """Feed it what the guest sends (b"" at EOF); it answers with a `Refusal`, or `Accepted`
    then the body as `h11.Data` and `h11.EndOfMessage`. `conn` is the h11 server side, for the
    answer. After the end of the request it takes nothing more: `unrelayed` counts those bytes."""

    def __init__(self) -> None:
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.head: RequestHead | None = None
        self.complete = False  # the whole request has been read
        self._buffer = b""
        self._closed = False  # refused or broken: nothing more is read
        self._after = 0

    @property
    def unrelayed(self) -> int:
        """Bytes the guest sent after its request (a second request): never relayed, unless the
        upstream switched protocols (then `conn.trailing_data` goes on raw)."""
        return (len(self.conn.trailing_data[0]) if self.complete else 0) + self._after

    def feed(self, data: bytes) -> list[GuestEvent]:
        if self.complete or self._closed:
            self._after += len(data)
            return []
        if self.head is None:
            self._buffer += data
            checked = check_head(self._buffer) if data else Refusal(400, "closed mid-head")
            if checked is INCOMPLETE:
                return []
            if isinstance(checked, Refusal):
                self._closed = True
                return [checked]
            self.head, data, self._buffer = checked, self._buffer, b""
        self.conn.receive_data(data)
        return self._events()

    def _events(self) -> list[GuestEvent]:
        out: list[GuestEvent] = []
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._closed = True
                out.append(Refusal(exc.error_status_hint, f"a malformed request: {exc}"))
                return out
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return out
            if isinstance(event, h11.Request):
                assert self.head is not None
                if not _agrees(event, self.head):
                    self._closed = True
                    return [*out, Refusal(400, "the request parses two ways")]
                out.append(Accepted(self.head, event))
            elif isinstance(event, h11.Data | h11.EndOfMessage | h11.ConnectionClosed):
                out.append(event)
                if isinstance(event, h11.EndOfMessage):
                    self.complete = True
                    return out
                if isinstance(event, h11.ConnectionClosed):
                    self._closed = True
                    return out


def bodiless(events: list[GuestEvent]) -> bool:
    """The request ended with its head: `events`, those after its `Accepted`, start with its
    end (no body to stream, or to send again)."""
    return bool(events) and isinstance(events[0], h11.EndOfMessage)


def _agrees(request: h11.Request, head: RequestHead) -> bool:
    """h11 read the head the raw check read (belt and braces: the same bytes, two parsers)."""
    hosts = [v for n, v in request.headers if n == b"host"]
    return request.method == head.method and len(hosts) <= 1


def upstream_request(request: h11.Request, upgrade: bool) -> h11.Request:
    """The request as it goes upstream: the guest's, with `Connection: close` (one request per
    connection), unless it asks for an upgrade, whose Connection header must stay."""
    if upgrade:
        headers = list(request.headers.raw_items())
    else:
        dropped = HOP_BY_HOP | NOT_UPGRADING
        headers = [(n, v) for n, v in request.headers.raw_items() if n.lower() not in dropped]
        headers.append((b"Connection", b"close"))
    return h11.Request(method=request.method, target=request.target, headers=headers)


def head_bytes(request: h11.Request) -> bytes:
    """The request's head as it goes upstream, written as h11 writes one (HTTP/1.1, Host
    first) from the fields h11 checked when it made `request`."""
    items = list(request.headers.raw_items())
    ordered = [i for i in items if i[0].lower() == b"host"]
    ordered += [i for i in items if i[0].lower() != b"host"]
    lines = [b"%s %s HTTP/1.1" % (request.method, request.target)]
    lines += [name + b": " + value for name, value in ordered]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def is_chunked(request: h11.Request) -> bool:
    """Its body goes in chunks (the only Transfer-Encoding `check_head` lets through)."""
    return any(name == b"transfer-encoding" for name, _ in request.headers)


def body_bytes(event: h11.Data | h11.EndOfMessage, chunked: bool) -> bytes:
    """A piece of the request's body as it goes upstream, framed as its head says: as it is
    for a Content-Length, else a chunk (and at the end the last chunk and any trailers)."""
    if isinstance(event, h11.Data):
        data = bytes(event.data)
        return b"%x\r\n%s\r\n" % (len(data), data) if chunked and data else data
    if not chunked:
        return b""
    trailers = b"".join(n + b": " + v + b"\r\n" for n, v in event.headers.raw_items())
    return b"0\r\n" + trailers + b"\r\n"


def refusal_bytes(status: int, text: str) -> bytes:
    """A complete plain-text answer that closes the connection."""
    body = f"Sanbox egress: {text}\n".encode()
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Refused"
    return (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
