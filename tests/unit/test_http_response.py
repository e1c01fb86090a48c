"""The upstream's answer as the egress proxy reads it: only its head, for where it ends, what the
computer is told about the connection and where its body ends. Bytes in, a head out; h11, as a
client reads an answer, is the judge of what the computer gets."""

from __future__ import annotations

import h11
import pytest

from sanbox.host.egress.http_request import MAX_HEAD
from sanbox.host.egress.http_response import (
    NO_BODY,
    UNTIL_CLOSE,
    BrokenAnswerError,
    ResponseHead,
    read_head,
)
from sanbox.host.egress.sniff import INCOMPLETE

pytestmark = pytest.mark.unit


def head_of(raw: bytes) -> ResponseHead:
    head = read_head(raw)
    assert isinstance(head, ResponseHead), head
    return head


def as_a_client_reads(raw: bytes, method: str = "GET") -> tuple[h11.Response, bytes]:
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target="/", headers=[("Host", "a.test")]))
    client.send(h11.EndOfMessage())
    client.receive_data(raw)
    client.receive_data(b"")
    while isinstance(response := client.next_event(), h11.InformationalResponse):
        pass
    assert isinstance(response, h11.Response), response
    body = b""
    while isinstance(event := client.next_event(), h11.Data):
        body += event.data
    assert isinstance(event, h11.EndOfMessage), event
    return response, body


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n"
        b"Keep-Alive: timeout=5\r\nX-A: 1\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.0 200 Fine\r\nServer: old\r\n\r\nuntil the close",
        b"HTTP/1.1 404 \r\ncontent-length: 3\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nno!",
        b"HTTP/1.1 204 No Content\r\nX-B: 2\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
    ],
)
def test_the_computer_reads_the_answer_the_upstream_gave_with_connection_close(raw: bytes) -> None:
    relayed, rest = b"", raw
    while True:
        head = head_of(rest)
        relayed += head.for_guest()
        rest = rest[head.size :]
        if not head.informational:
            break
    relayed += rest  # the body goes as it came, to its length or until the close
    theirs, their_body = as_a_client_reads(raw)
    ours, our_body = as_a_client_reads(relayed)
    assert (ours.status_code, our_body) == (theirs.status_code, their_body)
    hop = {b"connection", b"keep-alive"}
    assert [h for h in ours.headers if h[0] not in hop] == [
        h for h in theirs.headers if h[0] not in hop
    ]
    assert (b"connection", b"close") in list(ours.headers)


def test_an_informational_head_goes_as_it_came_and_a_101_keeps_its_upgrade() -> None:
    raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    head = head_of(raw + b"frames")
    assert head.informational and head.status == 101
    assert head.for_guest() == raw and head.size == len(raw)


@pytest.mark.parametrize(
    ("raw", "head_request", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", False, 12),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", True, NO_BODY),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", False, 7),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n", False, NO_BODY),
        (b"HTTP/1.1 204 No Content\r\n\r\n", False, NO_BODY),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", False, UNTIL_CLOSE),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", False, -1),
        (b"HTTP/1.1 200 OK\r\n\r\n", False, UNTIL_CLOSE),
    ],
)
def test_where_the_body_ends(raw: bytes, head_request: bool, body: int) -> None:
    assert head_of(raw).body(head_request) == body


@pytest.mark.parametrize(
    "length", [b"5, 6", b"abc", b"-1", b""], ids=["disagree", "letters", "negative", "empty"]
)
def test_a_content_length_that_names_no_one_length_is_broken(length: bytes) -> None:
    head = head_of(b"HTTP/1.1 200 OK\r\nContent-Length: " + length + b"\r\n\r\n")
    with pytest.raises(BrokenAnswerError):
        head.body(False)


def test_a_head_still_arriving_asks_for_more() -> None:
    assert read_head(b"") is INCOMPLETE
    assert read_head(b"HTT") is INCOMPLETE
    assert read_head(b"HTTP/1.1 200 OK\r\nContent-Le") is INCOMPLETE


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-not-http\r\n",  # refused before its head ends
        b"HTTP/2 200\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r" + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * MAX_HEAD,
    ],
    ids=["not-http", "http2", "status", "bare-lf", "folded", "no-colon", "name", "bare-cr", "big"],
)
def test_an_answer_that_is_not_http_1_is_broken(raw: bytes) -> None:
    with pytest.raises(BrokenAnswerError):
        read_head(raw)
