"""The response scanner of the secret proxy: a value in a header (as is, Basic-encoded at any
alignment, URL-encoded), or in a body however the body is cut into chunks, is caught and none of
it is released; a response without it passes byte for byte, and only a tail that could begin a
value is held back."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from sanbox.host.egress.leak_scan import MIN_FORM, LeakScanner, forms

pytestmark = pytest.mark.unit

VALUE = b"sk-live-0123456789abcdef/+=?&"
NORMAL = b'{"object": "list", "data": [{"id": "gpt-4o", "owned_by": "system"}]}\n' * 500


def relay(scanner: LeakScanner, chunks: list[bytes]) -> bytes | None:
    """What the guest gets of a body cut into `chunks`; None once the scanner stops it."""
    out = b""
    for chunk in chunks:
        released = scanner.feed(chunk)
        if released is None:
            return None
        out += released
    return out + scanner.finish()


def cuts(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_a_normal_response_passes_byte_for_byte() -> None:
    for size in (1, 7, 100, 65536):
        assert relay(LeakScanner([VALUE]), cuts(NORMAL, size)) == NORMAL
    assert not LeakScanner([VALUE]).head(b"OK", [(b"Content-Type", b"application/json")])


@pytest.mark.parametrize("split", range(1, len(VALUE)))
def test_a_value_split_across_two_chunks_is_caught_and_no_part_goes(split: int) -> None:
    body = b"x" * 1000 + VALUE + b"y" * 1000
    where = 1000 + split
    scanner = LeakScanner([VALUE])
    first = scanner.feed(body[:where])
    assert first is not None and VALUE[:2] not in first  # the start of the value is held
    assert scanner.feed(body[where:]) is None


@pytest.mark.parametrize("size", [1, 3, 16, 4096])
def test_a_value_in_any_chunking_is_caught(size: int) -> None:
    assert relay(LeakScanner([VALUE]), cuts(NORMAL + VALUE + NORMAL, size)) is None


@pytest.mark.parametrize(
    "encoded",
    [
        VALUE,
        base64.b64encode(b"user:" + VALUE),
        base64.b64encode(b"u:" + VALUE + b"!"),
        base64.b64encode(VALUE),
        base64.urlsafe_b64encode(b"ab" + VALUE),
        quote(VALUE.decode(), safe="").encode(),
        json.dumps(VALUE.decode()).encode(),
        json.dumps(VALUE.decode()).replace("/", "\\/").encode(),  # PHP's json_encode
        json.dumps(VALUE.decode()).replace("+", "\\u002B").replace("&", "\\u0026").encode(),
        json.dumps(VALUE.decode()).replace("+", "\\u002b").replace("&", "\\u0026").encode(),
    ],
)
def test_encodings_of_the_value_are_caught_in_headers_and_bodies(encoded: bytes) -> None:
    assert LeakScanner([VALUE]).head(b"OK", [(b"X-Echo", b"Basic " + encoded)])
    assert relay(LeakScanner([VALUE]), cuts(b"echo: " + encoded + b"\n", 5)) is None


def test_a_value_in_a_header_name_or_the_reason_is_caught() -> None:
    assert LeakScanner([VALUE]).head(b"OK " + VALUE, [])
    assert LeakScanner([b"tokenvalue123"]).head(b"OK", [(b"tokenvalue123", b"1")])


def test_only_a_tail_that_could_begin_a_value_is_held() -> None:
    scanner = LeakScanner([VALUE])
    assert scanner.feed(b"data: hello\n\n") == b"data: hello\n\n"  # a stream is not delayed
    assert scanner.feed(b"data: sk-li") == b"data: "
    assert scanner.feed(b"ke\n") == b"sk-like\n"
    assert scanner.finish() == b""
    tail = LeakScanner([VALUE])
    assert tail.feed(b"ends with sk-live") == b"ends with "
    assert tail.finish() == b"sk-live"  # the end of the body: it can no longer complete


def test_several_values_and_none() -> None:
    other = b"ghp_abcdefghijklmnop"
    scanner = LeakScanner([VALUE, other])
    assert relay(scanner, cuts(NORMAL + other, 9)) is None
    idle = LeakScanner([])
    assert idle.idle and idle.feed(VALUE) == VALUE and not idle.head(VALUE, [])


def test_short_forms_are_not_looked_for() -> None:
    assert all(len(f) >= MIN_FORM for f in forms(b"abcdefgh"))
    assert forms(b"abc") == set()


def test_a_quote_in_the_value_is_caught_as_dot_net_escapes_it() -> None:
    value = b'pa"ss+word/1<2>'
    echoed = b'{"key": "pa\\u0022ss\\u002Bword/1\\u003C2\\u003E"}'
    assert relay(LeakScanner([value]), [echoed]) is None
    assert relay(LeakScanner([value]), [echoed.lower()]) is None
