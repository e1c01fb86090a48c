"""The DNS message codec: queries in, the filter's responses out, A records out of upstream
responses, hostile input rejected."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest

from sanbox.host.egress.dnsmsg import (
    CLASS_IN,
    FLAG_QR,
    FLAG_RD,
    FLAG_TC,
    HEADER,
    TYPE_A,
    TYPE_AAAA,
    TYPE_CNAME,
    DnsFormatError,
    Rcode,
    answer_a,
    build_query,
    empty,
    encode_name,
    formerr,
    nxdomain,
    parse_a_records,
    parse_query,
    parse_response,
    refused,
    servfail,
    tcp_frame,
    tcp_unframe,
    with_id,
)
from sanbox.host.egress.resolver import system_upstream

pytestmark = pytest.mark.unit


def header(flags: int, qd: int = 1, an: int = 0, ident: int = 0x1234) -> bytes:
    return HEADER.pack(ident, flags, qd, an, 0, 0)


def rr(owner: bytes, rtype: int, rdata: bytes, ttl: int = 60) -> bytes:
    return owner + struct.pack("!HHIH", rtype, CLASS_IN, ttl, len(rdata)) + rdata


def test_build_and_parse_a_query() -> None:
    wire = build_query("Api.Example.TEST.", "AAAA", id=7)
    query = parse_query(wire)
    assert (query.id, query.name, query.qtype, query.qclass) == (7, "api.example.test", 28, 1)
    assert query.flags & FLAG_RD
    assert query.opcode == 0


def test_query_with_edns_opt_record_is_accepted() -> None:
    opt = b"\x00" + struct.pack("!HHIH", 41, 4096, 0, 0)
    wire = HEADER.pack(9, FLAG_RD, 1, 0, 0, 1) + encode_name("a.test") + b"\x00\x01\x00\x01" + opt
    assert parse_query(wire).name == "a.test"


def test_responses_echo_id_question_and_flags() -> None:
    wire = build_query("MiXeD.test", id=0xBEEF)
    for build, rcode in ((nxdomain, 3), (refused, 5), (servfail, 2), (empty, 0)):
        resp = build(wire)
        ident, flags, qd, an, ns, ar = HEADER.unpack_from(resp)
        assert (ident, qd, an, ns, ar) == (0xBEEF, 1, 0, 0, 0)
        assert flags & FLAG_QR and flags & FLAG_RD and flags & 0xF == rcode
        assert b"MiXeD" in resp  # the question as asked (0x20 randomisation survives)
        assert parse_a_records(resp) == (rcode, [])


def test_answer_a_round_trips() -> None:
    wire = build_query("a.test", id=1)
    resp = answer_a(wire, ["192.0.2.1", "198.51.100.2"], ttl=30)
    parsed = parse_response(resp)
    assert parsed.id == 1 and parsed.rcode == Rcode.NOERROR and parsed.name == "a.test"
    assert parsed.addresses == ["192.0.2.1", "198.51.100.2"]
    assert struct.unpack_from("!I", resp, len(resp) - 10)[0] == 30


def test_answer_a_fits_udp_size() -> None:
    wire = build_query("a.test")
    ips = [f"192.0.2.{i}" for i in range(100)]
    resp = answer_a(wire, ips, ttl=30, max_size=512)
    assert len(resp) <= 512
    assert len(parse_response(resp).addresses) == (512 - len(wire)) // 16
    with pytest.raises(ValueError):
        answer_a(wire, ["::1"], ttl=30)


def test_cname_chain_is_followed_and_strangers_ignored() -> None:
    question = encode_name("www.a.test") + struct.pack("!HH", TYPE_A, CLASS_IN)
    resp = (
        header(FLAG_QR | FLAG_RD, an=4)
        + question
        + rr(b"\xc0\x0c", TYPE_CNAME, encode_name("edge.cdn.test"))
        + rr(encode_name("evil.test"), TYPE_A, bytes([6, 6, 6, 6]))
        + rr(encode_name("edge.cdn.test"), TYPE_A, bytes([192, 0, 2, 9]))
        + rr(b"\xc0\x0c", TYPE_AAAA, bytes(16))
    )
    assert parse_a_records(resp) == (0, ["192.0.2.9"])


def test_ttl_is_the_least_along_the_chain() -> None:
    question = encode_name("www.a.test") + struct.pack("!HH", TYPE_A, CLASS_IN)
    resp = (
        header(FLAG_QR | FLAG_RD, an=4)
        + question
        + rr(b"\xc0\x0c", TYPE_CNAME, encode_name("edge.cdn.test"), ttl=40)
        + rr(encode_name("edge.cdn.test"), TYPE_A, bytes([192, 0, 2, 9]), ttl=90)
        + rr(encode_name("edge.cdn.test"), TYPE_A, bytes([192, 0, 2, 8]), ttl=70)
        + rr(encode_name("evil.test"), TYPE_A, bytes([6, 6, 6, 6]), ttl=1)
    )
    assert parse_response(resp).ttl == 40
    no_cname = header(FLAG_QR, an=1) + question + rr(b"\xc0\x0c", TYPE_A, bytes(4), ttl=7)
    assert parse_response(no_cname).ttl == 7
    assert parse_response(header(FLAG_QR, an=0) + question).ttl == 0


def test_compressed_names_in_answers() -> None:
    question = encode_name("b.test") + struct.pack("!HH", TYPE_A, CLASS_IN)
    # owner: label "x" then a pointer to "b.test" -> "x.b.test"; a CNAME from b.test to it
    resp = (
        header(FLAG_QR, an=2)
        + question
        + rr(b"\xc0\x0c", TYPE_CNAME, b"\x01x\xc0\x0c")
        + rr(b"\x01x\xc0\x0c", TYPE_A, bytes([203, 0, 113, 5]))
    )
    assert parse_a_records(resp) == (0, ["203.0.113.5"])


@pytest.mark.parametrize(
    "wire",
    [
        b"",
        b"\x00" * 11,
        header(0, qd=0),
        header(0, qd=2) + encode_name("a.test") + b"\0\1\0\1" * 2,
        header(FLAG_QR) + encode_name("a.test") + b"\0\1\0\1",
        header(0) + encode_name("a.test") + b"\0\1",  # truncated question
        header(0) + b"\x05ab",  # truncated label
        header(0) + b"\x01a",  # no terminating zero
        header(0) + b"\xc0\x0c\0\1\0\1",  # pointer to itself
        header(0) + b"\x01a\xc0\x10\0\1\0\1",  # pointer forward
        header(0) + b"\xc0",  # truncated pointer
        header(0) + b"\x41" + b"a" * 65 + b"\0\0\1\0\1",  # extended label type
        header(0) + b"\x03a.b\x04test\0\0\1\0\1",  # a dot inside a label
        header(0) + b"\x03a\x00b\0\0\1\0\1",  # a NUL inside a label
        header(0) + b"\x3f" + b"a" * 63 + (b"\x3f" + b"b" * 63) * 4 + b"\0\0\1\0\1",  # > 255
    ],
)
def test_malformed_queries_are_rejected(wire: bytes) -> None:
    with pytest.raises(DnsFormatError):
        parse_query(wire)


def test_pointer_loop_in_a_response_is_rejected() -> None:
    question = encode_name("c.test") + b"\0\1\0\1"
    base = header(FLAG_QR, an=1) + question
    loop_at = len(base)
    looped = base + struct.pack("!H", 0xC000 | loop_at) + b"\0\1\0\1" + b"\0" * 6
    with pytest.raises(DnsFormatError):
        parse_a_records(looped)


def test_every_truncation_of_a_response_is_safe() -> None:
    resp = answer_a(build_query("a.test"), ["192.0.2.1", "192.0.2.2"], ttl=5)
    for k in range(len(resp)):
        with contextlib.suppress(DnsFormatError):
            parse_response(resp[:k])


def test_formerr() -> None:
    assert formerr(b"\x01\x02") is None
    assert formerr(header(FLAG_QR)) is None
    resp = formerr(header(FLAG_RD, qd=3) + b"junk")
    assert resp is not None
    ident, flags, qd, *_ = HEADER.unpack_from(resp)
    assert (ident, flags & 0xF, qd, bool(flags & FLAG_QR)) == (0x1234, 1, 0, True)


def test_encode_name_rejects_bad_names() -> None:
    for bad in ("a..b", "a b.test", "x" * 64 + ".test", "é.test", ".".join(["abcdefgh"] * 30)):
        with pytest.raises(DnsFormatError):
            encode_name(bad)
    assert encode_name(".") == b"\0"
    with pytest.raises(ValueError):
        build_query("a.test", "NOPE")


def test_tc_flag_and_with_id() -> None:
    resp = bytearray(empty(build_query("a.test", id=1)))
    resp[2] |= FLAG_TC >> 8
    assert parse_response(bytes(resp)).truncated
    assert parse_response(with_id(bytes(resp), 77)).id == 77


def test_tcp_framing() -> None:
    one, two = build_query("a.test"), build_query("b.test")
    stream = tcp_frame(one) + tcp_frame(two)
    assert tcp_unframe(stream) == ([one, two], b"")
    assert tcp_unframe(stream[:-1]) == ([one], tcp_frame(two)[:-1])
    assert tcp_unframe(b"\x00") == ([], b"\x00")
    with pytest.raises(ValueError):
        tcp_frame(b"x" * 70000)


def test_system_upstream(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("# comment\nsearch lan\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n")
    assert system_upstream(conf) == ("192.0.2.53", 53)
    conf.write_text("nameserver fe80::1%eth0\n")
    assert system_upstream(conf) == ("fe80::1%eth0", 53)
    conf.write_text("search lan\n")
    assert system_upstream(conf) == ("127.0.0.1", 53)
    assert system_upstream(tmp_path / "missing") == ("127.0.0.1", 53)
