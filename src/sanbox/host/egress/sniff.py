"""Sans-IO sniffers for the egress proxy: the host a client asks for, read from the first
bytes of a connection without consuming them. Feed the whole buffer read so far each time;
`INCOMPLETE` means read more, `NOT_TLS` / `NOT_HTTP` means refuse the connection.

- `tls_server_name`: the SNI of a TLS ClientHello (which may span several records).
- `http_host`: the Host of an HTTP/1.x request head (or the authority of an absolute-form
  target, which must then agree with Host).

Host names come back lowercased, without a trailing dot or a port; an IPv6 literal without
its brackets. Anything that is not a plain host name is treated as malformed."""

from __future__ import annotations

import enum
import ipaddress
import re
import struct
from typing import Final


class Incomplete(enum.Enum):
    INCOMPLETE = "incomplete"


class NotTls(enum.Enum):
    NOT_TLS = "not TLS"


class NotHttp(enum.Enum):
    NOT_HTTP = "not HTTP"


INCOMPLETE: Final = Incomplete.INCOMPLETE
NOT_TLS: Final = NotTls.NOT_TLS
NOT_HTTP: Final = NotHttp.NOT_HTTP

MAX_TLS_RECORD = 16384 + 2048  # TLSPlaintext at most 2^14; a little slack for old stacks
MAX_CLIENT_HELLO = 65536
MAX_HTTP_HEAD = 65536

_HOSTNAME = re.compile(r"[a-z0-9_][a-z0-9_-]{0,62}(\.[a-z0-9_][a-z0-9_-]{0,62})*")
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/1\.[01]")
ABSOLUTE_TARGET = re.compile(rb"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
_MAX_METHOD = 32


def normalize_host(text: str) -> str | None:
    """`text` as a host name (lowercase, no trailing dot) or IP literal; None if it is not."""
    host = text.lower()
    if host.endswith("."):
        host = host[:-1]
    if 0 < len(host) <= 253 and _HOSTNAME.fullmatch(host):
        return host
    return None


def _handshake_bytes(buf: bytes) -> bytes | Incomplete | NotTls:
    """The ClientHello handshake message (type and length included) out of the leading
    handshake records of `buf`."""
    hello = bytearray()
    pos = 0
    while True:
        header = buf[pos : pos + 5]
        if header[:1] and header[0] != 0x16:
            return NOT_TLS
        if header[1:2] and header[1] != 3:
            return NOT_TLS
        if header[2:3] and header[2] > 4:
            return NOT_TLS
        if len(header) < 5:
            return INCOMPLETE
        (size,) = struct.unpack_from("!H", header, 3)
        if size == 0 or size > MAX_TLS_RECORD:
            return NOT_TLS
        fragment = buf[pos + 5 : pos + 5 + size]
        hello += fragment
        if len(hello) >= 4:
            if hello[0] != 1:  # client_hello
                return NOT_TLS
            length = int.from_bytes(hello[1:4], "big")
            if length > MAX_CLIENT_HELLO:
                return NOT_TLS
            if len(hello) >= 4 + length:
                return bytes(hello[: 4 + length])
        if len(fragment) < size:
            return INCOMPLETE
        pos += 5 + size


class _Reader:
    """Bounds-checked reads over a ClientHello; `_MalformedError` on overrun."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise _MalformedError
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> _Reader:
        return _Reader(self.take(self.uint(length_bytes)))

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


class _MalformedError(Exception):
    pass


def _server_name(hello: bytes) -> str | None | NotTls:
    body = _Reader(hello[4:])
    body.take(2 + 32)  # legacy_version, random
    session_id = body.vector(1)
    if session_id.left > 32:
        return NOT_TLS
    suites = body.vector(2)
    if suites.left == 0 or suites.left % 2:
        return NOT_TLS
    body.vector(1)  # compression methods
    if body.left == 0:
        return None  # no extensions at all
    extensions = body.vector(2)
    if body.left:
        return NOT_TLS
    seen: set[int] = set()
    name: str | None = None
    while extensions.left:
        kind = extensions.uint(2)
        data = extensions.vector(2)
        if kind in seen:
            return NOT_TLS  # duplicate extensions are illegal (RFC 8446 4.2)
        seen.add(kind)
        if kind != 0:  # server_name
            continue
        names = data.vector(2)
        if data.left:
            return NOT_TLS
        while names.left:
            name_type = names.uint(1)
            value = names.vector(2).data
            if name_type != 0:  # host_name
                continue
            if name is not None:
                return NOT_TLS  # one host_name only (RFC 6066 3)
            try:
                host = normalize_host(value.decode("ascii"))
            except UnicodeDecodeError:
                return NOT_TLS
            if host is None:
                return NOT_TLS
            name = host
    return name


def tls_server_name(buf: bytes) -> str | None | Incomplete | NotTls:
    """The SNI host name of the TLS ClientHello at the start of `buf` (None if it has none)."""
    hello = _handshake_bytes(buf)
    if not isinstance(hello, bytes):
        return hello
    try:
        return _server_name(hello)
    except _MalformedError:
        return NOT_TLS


def looks_like_request_start(buf: bytes) -> bool:
    """Whether `buf`, a head without its end yet, can still become an HTTP/1.x request."""
    first_line = buf.split(b"\r\n", 1)[0]
    method, space, _ = first_line.partition(b" ")
    if not space:
        return (not method or bool(TOKEN.fullmatch(method))) and len(method) <= _MAX_METHOD
    return bool(TOKEN.fullmatch(method)) and len(method) <= _MAX_METHOD


def split_authority(authority: str) -> str | None | NotHttp:
    """The host of `host[:port]` / `[v6][:port]` (None if empty), or NOT_HTTP."""
    if "@" in authority:
        return NOT_HTTP
    if not authority:
        return None
    if authority.startswith("["):
        inside, bracket, rest = authority[1:].partition("]")
        if not bracket or (rest and not re.fullmatch(r":[0-9]{0,5}", rest)):
            return NOT_HTTP
        try:
            return str(ipaddress.IPv6Address(inside))
        except ValueError:
            return NOT_HTTP
    host, colon, port = authority.partition(":")
    if colon and not re.fullmatch(r"[0-9]{0,5}", port):
        return NOT_HTTP
    normal = normalize_host(host)
    return NOT_HTTP if normal is None else normal


def http_host(buf: bytes) -> str | None | Incomplete | NotHttp:
    """The host an HTTP/1.x request head at the start of `buf` asks for (None if it names
    none: no Host header and an origin-form target)."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HTTP_HEAD)
    if end < 0:
        if len(buf) >= MAX_HTTP_HEAD or not looks_like_request_start(buf):
            return NOT_HTTP
        return INCOMPLETE
    request_line, *header_lines = buf[:end].split(b"\r\n")
    match = REQUEST_LINE.fullmatch(request_line)
    if match is None:
        return NOT_HTTP
    hosts: list[bytes] = []
    for line in header_lines:
        name, colon, value = line.partition(b":")
        if not colon or not TOKEN.fullmatch(name) or b"\n" in value or b"\r" in value:
            return NOT_HTTP  # also rejects obsolete line folding (a leading space)
        if name.lower() == b"host":
            hosts.append(value.strip(b" \t"))
    if len(hosts) > 1:
        return NOT_HTTP
    host: str | None | NotHttp = None
    if hosts:
        host = split_authority(hosts[0].decode("latin-1"))
    absolute = ABSOLUTE_TARGET.match(match.group(2))
    if absolute is None:
        return host
    target_host = split_authority(absolute.group(1).decode("latin-1"))
    if isinstance(host, NotHttp) or target_host is None:
        return NOT_HTTP
    if hosts and host != target_host:
        return NOT_HTTP  # the target and Host disagree: which one would upstream use?
    return target_host
