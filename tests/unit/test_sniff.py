"""The egress proxy's sniffers: SNI out of real ClientHellos, Host out of request heads, fed
whole and byte by byte."""

from __future__ import annotations

import ssl
import struct

import pytest

from sanbox.host.egress.sniff import (
    INCOMPLETE,
    NOT_HTTP,
    NOT_TLS,
    Incomplete,
    NotHttp,
    NotTls,
    http_host,
    tls_server_name,
)

pytestmark = pytest.mark.unit


def client_hello(server_hostname: str | None) -> bytes:
    """The bytes a real TLS client sends first."""
    ctx = ssl.create_default_context()
    if server_hostname is None:
        ctx.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def split_records(hello: bytes, first: int) -> bytes:
    """The same handshake message carried in two records, the first of `first` bytes."""
    assert hello[0] == 0x16
    body = hello[5:]
    head = hello[:3]
    one, two = body[:first], body[first:]
    return head + struct.pack("!H", len(one)) + one + head + struct.pack("!H", len(two)) + two


def test_real_client_hello_gives_its_sni_lowercased() -> None:
    assert tls_server_name(client_hello("Example.TEST")) == "example.test"


def test_client_hello_without_sni_gives_none() -> None:
    assert tls_server_name(client_hello(None)) is None


def test_every_prefix_of_a_client_hello_is_incomplete() -> None:
    hello = client_hello("example.test")
    for k in range(len(hello)):
        assert tls_server_name(hello[:k]) is INCOMPLETE, k
    assert tls_server_name(hello + b"\x17\x03\x03trailing") == "example.test"


def test_client_hello_over_two_records() -> None:
    hello = client_hello("api.example.test")
    for first in (1, 3, 4, 40, 200):
        both = split_records(hello, first)
        assert tls_server_name(both) == "api.example.test"
        for k in range(len(both)):
            assert tls_server_name(both[:k]) is INCOMPLETE, (first, k)


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x15\x03\x03\x00\x02\x02\x28",  # an alert
        b"\x16\x02",  # SSL 2-ish
        b"\x16\x03\x01\x00\x00",  # empty record
        b"\x16\x03\x01\xff\xff",  # record too long
        b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",  # a ServerHello
        b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",  # a ClientHello too short for its fields
    ],
)
def test_not_tls(data: bytes) -> None:
    assert tls_server_name(data) is NOT_TLS


def test_corrupted_hellos_never_raise() -> None:
    hello = client_hello("example.test")
    for i in range(5, len(hello)):
        for value in (0x00, 0xFF):
            mutated = hello[:i] + bytes([value]) + hello[i + 1 :]
            result = tls_server_name(mutated)
            assert result is None or isinstance(result, str | Incomplete | NotTls)


def test_bad_sni_characters_are_refused() -> None:
    good = client_hello("aaaa.test")
    assert tls_server_name(good.replace(b"aaaa.test", b"a\x00aa.test")) is NOT_TLS
    assert tls_server_name(good.replace(b"aaaa.test", b"a/aa.test")) is NOT_TLS


@pytest.mark.parametrize(
    ("head", "host"),
    [
        (b"GET / HTTP/1.1\r\nHost: Example.TEST\r\n\r\n", "example.test"),
        (b"GET / HTTP/1.1\r\nhost:example.test:8080\r\n\r\n", "example.test"),
        (b"GET / HTTP/1.1\r\nHOST: \t example.test. \r\n\r\n", "example.test"),
        (b"GET / HTTP/1.1\r\nHost: [2001:DB8::1]:80\r\n\r\n", "2001:db8::1"),
        (b"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", "::1"),
        (b"GET / HTTP/1.1\r\nHost: 203.0.113.7\r\n\r\n", "203.0.113.7"),
        (b"POST /x HTTP/1.0\r\nA: b\r\nHost: x.test\r\n\r\nbody", "x.test"),
        (b"GET / HTTP/1.0\r\nAccept: */*\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", None),
        (b"GET http://Abs.test:81/p HTTP/1.1\r\n\r\n", "abs.test"),
        (b"GET http://abs.test/p HTTP/1.1\r\nHost: abs.test\r\n\r\n", "abs.test"),
    ],
)
def test_http_host(head: bytes, host: str | None) -> None:
    assert http_host(head) == host


@pytest.mark.parametrize(
    "head",
    [
        b"\x16\x03\x01\x02\x00",
        b"GET / SPDY/3\r\nHost: x.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test\nX-Smuggle: 1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test:http\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: [nope]\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"GET http://evil.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n",
        b"GET / HTTP/1.1\n\r\n\r\n",
    ],
)
def test_not_http(head: bytes) -> None:
    assert http_host(head) is NOT_HTTP


def test_every_prefix_of_a_request_head_is_incomplete() -> None:
    head = b"GET /index.html HTTP/1.1\r\nUser-Agent: t\r\nHost: www.example.test:80\r\n\r\n"
    for k in range(len(head)):
        assert http_host(head[:k]) is INCOMPLETE, k
    assert http_host(head) == "www.example.test"


def test_head_without_end_is_refused_at_the_limit() -> None:
    head = b"GET / HTTP/1.1\r\nX: " + b"a" * 70000
    assert http_host(head[:1000]) is INCOMPLETE
    assert http_host(head) is NOT_HTTP


def test_sentinels_narrow_cleanly() -> None:
    result = http_host(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
    assert not isinstance(result, Incomplete | NotHttp)
    assert repr(INCOMPLETE) != repr(NOT_HTTP) != repr(NOT_TLS)
