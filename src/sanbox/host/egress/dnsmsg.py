"""DNS messages (RFC 1035), sans-IO: parse a query, build the few responses the DNS filter
gives, build a query and read the A records out of a response, and the 2-byte length framing
DNS uses over TCP.

Names are read strictly: labels of letters, digits, `-` and `_` only (so the dotted text of a
name always means the same labels on the wire), at most 255 octets, and compression pointers
must point backwards, so a pointer loop cannot exist."""

from __future__ import annotations

import enum
import ipaddress
import secrets
import struct
from dataclasses import dataclass

TYPE_A = 1
TYPE_NS = 2
TYPE_CNAME = 5
TYPE_SOA = 6
TYPE_PTR = 12
TYPE_MX = 15
TYPE_TXT = 16
TYPE_AAAA = 28
TYPE_SRV = 33
TYPE_OPT = 41
TYPE_HTTPS = 65
TYPE_ANY = 255
CLASS_IN = 1

QTYPES = {
    "A": TYPE_A,
    "NS": TYPE_NS,
    "CNAME": TYPE_CNAME,
    "SOA": TYPE_SOA,
    "PTR": TYPE_PTR,
    "MX": TYPE_MX,
    "TXT": TYPE_TXT,
    "AAAA": TYPE_AAAA,
    "SRV": TYPE_SRV,
    "HTTPS": TYPE_HTTPS,
    "ANY": TYPE_ANY,
}

FLAG_QR = 0x8000
FLAG_AA = 0x0400
FLAG_TC = 0x0200
FLAG_RD = 0x0100
FLAG_RA = 0x0080
OPCODE_QUERY = 0

HEADER = struct.Struct("!HHHHHH")
MAX_NAME = 255
MAX_UDP = 512  # what a client without EDNS accepts
MAX_TCP = 65535
_LABEL_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_MAX_CHAIN = 16  # CNAME hops followed in a response


class Rcode(enum.IntEnum):
    NOERROR = 0
    FORMERR = 1
    SERVFAIL = 2
    NXDOMAIN = 3
    NOTIMP = 4
    REFUSED = 5


class DnsFormatError(ValueError):
    """Bytes that are not a well-formed DNS message (or not one this codec accepts)."""


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query. `question` is the question section's raw bytes (echoed in answers, so
    a client's 0x20 case randomisation survives); `name` is lowercased, without trailing dot."""

    id: int
    flags: int
    name: str
    qtype: int
    qclass: int
    question: bytes

    @property
    def opcode(self) -> int:
        return (self.flags >> 11) & 0xF


@dataclass(frozen=True, slots=True)
class Response:
    """What a resolver needs from a response: `addresses` are the A records of the question's
    name or of the CNAME chain that starts at it (records for other names are ignored)."""

    id: int
    flags: int
    rcode: int
    name: str | None
    qtype: int | None
    addresses: list[str]
    ttl: int = 0  # the least TTL of the records that gave `addresses` (0 if there are none)

    @property
    def truncated(self) -> bool:
        return bool(self.flags & FLAG_TC)


def read_name(buf: bytes, offset: int) -> tuple[str, int]:
    """The name at `offset` (lowercased, no trailing dot) and the offset just after it."""
    labels: list[str] = []
    length = 1
    end: int | None = None
    pos = offset
    while True:
        if pos >= len(buf):
            raise DnsFormatError("truncated name")
        size = buf[pos]
        kind = size & 0xC0
        if kind == 0xC0:
            if pos + 1 >= len(buf):
                raise DnsFormatError("truncated compression pointer")
            target = ((size & 0x3F) << 8) | buf[pos + 1]
            if end is None:
                end = pos + 2
            if target >= pos:  # only backwards: no loops
                raise DnsFormatError("compression pointer does not point backwards")
            pos = target
            continue
        if kind:
            raise DnsFormatError(f"unsupported label type {kind:#x}")
        if size == 0:
            return ".".join(labels), pos + 1 if end is None else end
        label = buf[pos + 1 : pos + 1 + size]
        if len(label) != size:
            raise DnsFormatError("truncated label")
        if not _LABEL_BYTES.issuperset(label):
            raise DnsFormatError("label with characters other than letters, digits, - and _")
        length += size + 1
        if length > MAX_NAME:
            raise DnsFormatError("name longer than 255 octets")
        labels.append(label.decode("ascii").lower())
        pos += 1 + size


def encode_name(name: str) -> bytes:
    """`name` in wire format (uncompressed); raises DnsFormatError if it is not a valid name."""
    text = name.rstrip(".") if name != "." else ""
    out = bytearray()
    for label in text.split(".") if text else []:
        raw = label.encode("ascii", "replace")
        if not raw or len(raw) > 63 or not _LABEL_BYTES.issuperset(raw):
            raise DnsFormatError(f"{name!r} is not a valid DNS name")
        out += bytes([len(raw)]) + raw
    out += b"\0"
    if len(out) > MAX_NAME:
        raise DnsFormatError(f"{name!r} is longer than 255 octets")
    return bytes(out)


def _header(buf: bytes) -> tuple[int, int, int, int, int, int]:
    if len(buf) < HEADER.size:
        raise DnsFormatError("shorter than a DNS header")
    return HEADER.unpack_from(buf)


def parse_query(buf: bytes) -> Query:
    """A query with exactly one question; other sections (an EDNS OPT record) are ignored."""
    ident, flags, qdcount, _, _, _ = _header(buf)
    if flags & FLAG_QR:
        raise DnsFormatError("a response, not a query")
    if qdcount != 1:
        raise DnsFormatError(f"{qdcount} questions (expected 1)")
    name, pos = read_name(buf, HEADER.size)
    if pos + 4 > len(buf):
        raise DnsFormatError("truncated question")
    qtype, qclass = struct.unpack_from("!HH", buf, pos)
    return Query(ident, flags, name, qtype, qclass, buf[HEADER.size : pos + 4])


def _reply(query: Query, rcode: Rcode, answers: bytes = b"", ancount: int = 0) -> bytes:
    flags = FLAG_QR | (query.flags & 0x7800) | (query.flags & FLAG_RD) | FLAG_RA | rcode
    return HEADER.pack(query.id, flags, 1, ancount, 0, 0) + query.question + answers


def _parsed(query: bytes | Query) -> Query:
    return query if isinstance(query, Query) else parse_query(query)


def nxdomain(query: bytes | Query) -> bytes:
    return _reply(_parsed(query), Rcode.NXDOMAIN)


def refused(query: bytes | Query) -> bytes:
    return _reply(_parsed(query), Rcode.REFUSED)


def servfail(query: bytes | Query) -> bytes:
    return _reply(_parsed(query), Rcode.SERVFAIL)


def notimp(query: bytes | Query) -> bytes:
    return _reply(_parsed(query), Rcode.NOTIMP)


def empty(query: bytes | Query) -> bytes:
    """NOERROR with no records (the name exists, not with this type)."""
    return _reply(_parsed(query), Rcode.NOERROR)


def formerr(buf: bytes) -> bytes | None:
    """FORMERR for a malformed query, or None when there is nothing to answer (no header, or
    the message is itself a response)."""
    if len(buf) < HEADER.size:
        return None
    ident, flags, _, _, _, _ = HEADER.unpack_from(buf)
    if flags & FLAG_QR:
        return None
    reply_flags = FLAG_QR | (flags & 0x7800) | (flags & FLAG_RD) | FLAG_RA | Rcode.FORMERR
    return HEADER.pack(ident, reply_flags, 0, 0, 0, 0)


def answer_a(query: bytes | Query, ips: list[str], ttl: int, max_size: int = MAX_TCP) -> bytes:
    """NOERROR with one A record per address, owned by the question's name; addresses that
    would take the message over `max_size` are left out (a client gets fewer, never TC)."""
    q = _parsed(query)
    room = max(0, (max_size - HEADER.size - len(q.question)) // 16)
    records = b""
    for ip in ips[:room]:
        try:
            packed = ipaddress.IPv4Address(ip).packed
        except ValueError as exc:
            raise ValueError(f"not an IPv4 address: {ip!r}") from exc
        # owner: a pointer to the question's name, right after the header
        records += struct.pack("!HHHIH", 0xC000 | HEADER.size, TYPE_A, CLASS_IN, ttl, 4) + packed
    return _reply(q, Rcode.NOERROR, records, min(len(ips), room))


def build_query(name: str, qtype: str | int = "A", id: int | None = None) -> bytes:
    """A recursive query for `name` (random id unless given)."""
    code = qtype if isinstance(qtype, int) else QTYPES.get(qtype.upper())
    if code is None:
        raise ValueError(f"unknown query type {qtype!r}")
    ident = secrets.randbelow(0x10000) if id is None else id
    return (
        HEADER.pack(ident, FLAG_RD, 1, 0, 0, 0)
        + encode_name(name)
        + struct.pack("!HH", code, CLASS_IN)
    )


def parse_response(buf: bytes) -> Response:
    ident, flags, qdcount, ancount, _, _ = _header(buf)
    if not flags & FLAG_QR:
        raise DnsFormatError("a query, not a response")
    pos = HEADER.size
    qname: str | None = None
    qtype: int | None = None
    for i in range(qdcount):
        name, pos = read_name(buf, pos)
        if pos + 4 > len(buf):
            raise DnsFormatError("truncated question")
        if i == 0:
            qname, qtype = name, struct.unpack_from("!H", buf, pos)[0]
        pos += 4
    cnames: dict[str, tuple[str, int]] = {}
    a_records: list[tuple[str, str, int]] = []
    for _ in range(ancount):
        owner, pos = read_name(buf, pos)
        if pos + 10 > len(buf):
            raise DnsFormatError("truncated record")
        rtype, rclass, ttl, rdlength = struct.unpack_from("!HHIH", buf, pos)
        pos += 10
        if pos + rdlength > len(buf):
            raise DnsFormatError("truncated record data")
        if rclass == CLASS_IN and rtype == TYPE_A and rdlength == 4:
            a_records.append((owner, str(ipaddress.IPv4Address(buf[pos : pos + 4])), ttl))
        elif rclass == CLASS_IN and rtype == TYPE_CNAME:
            target, _ = read_name(buf, pos)
            cnames.setdefault(owner, (target, ttl))
        pos += rdlength
    chain: set[str] = set()
    ttls: list[int] = []
    current = qname
    while current is not None and current not in chain and len(chain) <= _MAX_CHAIN:
        chain.add(current)
        link = cnames.get(current)
        if link is None:
            break
        current, ttl = link
        ttls.append(ttl)
    found = [(ip, ttl) for owner, ip, ttl in a_records if owner in chain]
    addresses = [ip for ip, _ in found]
    least = min(ttls + [ttl for _, ttl in found]) if found else 0
    return Response(ident, flags, flags & 0xF, qname, qtype, addresses, least)


def parse_a_records(resp: bytes) -> tuple[int, list[str]]:
    """The rcode and the A records for the question's name (through its CNAME chain)."""
    parsed = parse_response(resp)
    return parsed.rcode, parsed.addresses


def with_id(message: bytes, ident: int) -> bytes:
    """`message` with its id replaced."""
    if len(message) < 2:
        raise DnsFormatError("shorter than a DNS header")
    return struct.pack("!H", ident) + message[2:]


def tcp_frame(message: bytes) -> bytes:
    """`message` with the 2-byte length prefix DNS uses over TCP."""
    if len(message) > MAX_TCP:
        raise ValueError("a DNS message is at most 65535 bytes")
    return struct.pack("!H", len(message)) + message


def tcp_unframe(buf: bytes) -> tuple[list[bytes], bytes]:
    """The complete length-prefixed messages at the start of `buf`, and the bytes left over."""
    messages: list[bytes] = []
    pos = 0
    while pos + 2 <= len(buf):
        (size,) = struct.unpack_from("!H", buf, pos)
        if pos + 2 + size > len(buf):
            break
        messages.append(buf[pos + 2 : pos + 2 + size])
        pos += 2 + size
    return messages, buf[pos:]
