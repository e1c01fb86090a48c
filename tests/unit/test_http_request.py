"""A guest tries to get a plain-HTTP request past the egress proxy's check: a second request on an
allowed connection, or a head two parsers would read differently. Bytes in, events out."""

from __future__ import annotations

from collections.abc import Sequence

import h11
import pytest

from sanbox.host.egress.http_request import (
    MAX_HEAD,
    Accepted,
    GuestEvent,
    GuestRequest,
    Refusal,
    RequestHead,
    body_bytes,
    check_head,
    head_bytes,
    is_chunked,
    refusal_bytes,
    upstream_request,
)
from sanbox.host.egress.sniff import INCOMPLETE

pytestmark = pytest.mark.unit

FIRST = b"GET /a HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
SECOND = b"GET /secret HTTP/1.1\r\nHost: blocked.test\r\n\r\n"


def relayed(events: Sequence[GuestEvent]) -> bytes:
    """What reaches the upstream: the accepted request written again, then its body."""
    out, chunked = b"", False
    for event in events:
        if isinstance(event, Accepted):
            request = upstream_request(event.request, event.head.upgrade)
            out += head_bytes(request)
            chunked = is_chunked(request)
        elif isinstance(event, h11.Data | h11.EndOfMessage):
            out += body_bytes(event, chunked)
    return out


def h11_relayed(events: Sequence[GuestEvent]) -> bytes:
    """What h11's client would send for the same events (the relay wrote it so before)."""
    client = h11.Connection(h11.CLIENT)
    out = b""
    for event in events:
        if isinstance(event, Accepted):
            out += client.send(upstream_request(event.request, event.head.upgrade)) or b""
        elif isinstance(event, h11.Data | h11.EndOfMessage):
            out += client.send(event) or b""
    return out


@pytest.mark.parametrize(
    "raw",
    [
        FIRST,
        b"GET http://allowed.test/x?q=1 HTTP/1.1\r\nUser-Agent: t\r\nHOST: allowed.test\r\n\r\n",
        b"POST /up HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\n\r\nhello",
        b"POST /up HTTP/1.0\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\n",
        b"PUT /c HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nX-Sum: 8\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Keep-Alive: 5\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: keep-alive, x\r\nX: a  b\r\n\r\n",
    ],
)
def test_the_request_goes_upstream_byte_for_byte_as_h11_would_write_it(raw: bytes) -> None:
    events = GuestRequest().feed(raw)
    assert isinstance(events[0], Accepted) and isinstance(events[-1], h11.EndOfMessage)
    assert relayed(events) == h11_relayed(events)


def test_a_chunked_body_fed_in_pieces_goes_upstream_as_h11_would_write_it() -> None:
    raw = (
        b"POST /c HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"a\r\n0123456789\r\n4\r\nwxyz\r\n0\r\n\r\n"
    )
    guest, events = GuestRequest(), []
    for i in range(0, len(raw), 7):
        events += guest.feed(raw[i : i + 7])
    assert relayed(events) == h11_relayed(events)
    assert relayed(events).endswith(b"0\r\n\r\n")


def test_a_pipelined_second_request_for_another_host_is_never_relayed() -> None:
    guest = GuestRequest()
    events = guest.feed(FIRST + SECOND)
    assert [type(e) for e in events] == [Accepted, h11.EndOfMessage]
    assert isinstance(events[0], Accepted) and events[0].head.name == "allowed.test"
    assert b"blocked.test" not in relayed(events) and b"/secret" not in relayed(events)
    assert guest.unrelayed == len(SECOND)
    assert b"Connection: close" in relayed(events)  # the upstream answers one request only


def test_a_keep_alive_second_request_later_is_not_read_either() -> None:
    guest = GuestRequest()
    assert guest.complete is False and guest.feed(FIRST)[-1] == h11.EndOfMessage()
    assert guest.feed(SECOND) == [] and guest.unrelayed == len(SECOND)


def test_a_request_hidden_in_a_body_stays_body() -> None:
    body = SECOND
    head = b"POST /up HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n\r\n" % len(body)
    events = GuestRequest().feed(head + body)
    assert [type(e) for e in events] == [Accepted, h11.Data, h11.EndOfMessage]
    assert relayed(events).endswith(b"\r\n\r\n" + body)


def test_a_chunked_body_streams_piece_by_piece() -> None:
    guest = GuestRequest()
    head = b"POST /up HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert [type(e) for e in guest.feed(head)] == [Accepted]
    assert guest.feed(b"5\r\nhel") == [h11.Data(data=b"hel", chunk_start=True)]
    assert guest.feed(b"lo\r\n") == [h11.Data(data=b"lo", chunk_end=True)]
    assert guest.feed(b"0\r\n\r\n" + SECOND) == [h11.EndOfMessage()]
    assert guest.unrelayed == len(SECOND)


@pytest.mark.parametrize(
    ("head", "status", "why"),
    [
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
            "Transfer-Encoding together with Content",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Length: 4\r\n\r\n",
            400,
            "Transfer-Encoding together with Content",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nContent-Length: 4\r\n"
            b"\r\n",
            400,
            "several Content-Length values",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nContent-Length: 40\r\n"
            b"\r\n",
            400,
            "several Content-Length values",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4, 4\r\n\r\n",
            400,
            "several Content-Length values",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: +4\r\n\r\n",
            400,
            "a malformed Content-Length",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
            "Transfer-Encoding other than chunked",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            501,
            "Transfer-Encoding other than chunked",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: 1\r\n Host: blocked.test\r\n\r\n",
            400,
            "obsolete line folding",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\tTransfer-Encoding: chunked\r\n\r\n",
            400,
            "obsolete line folding",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: blocked.test\r\n\r\n",
            400,
            "several Host headers",
        ),
        (
            b"GET http://blocked.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            400,
            "the Host header and the request target name different hosts",
        ),
        (
            b"GET / HTTP/1.1\nHost: allowed.test\n\nGET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n",
            400,
            "a bare CR or LF",
        ),
        (b"GET / HTTP/1.1\r\nHost: allowed.test\rX: y\r\n\r\n", 400, "a bare CR or LF"),
        (b"GET / HTTP/1.1\r\nHost : allowed.test\r\n\r\n", 400, "a malformed header line"),
        (
            b"CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n",
            405,
            "CONNECT is not relayed",
        ),
        (b"GET / HTTP/1.1\r\nUser-Agent: x\r\n\r\n", 400, "without a Host header"),
        (b"GET / HTTP/1.1\r\nHost: user@allowed.test\r\n\r\n", 400, "a malformed Host"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "not an HTTP/1.x request"),
    ],
)
def test_smuggling_shapes_are_refused_before_anything_is_relayed(
    head: bytes, status: int, why: str
) -> None:
    checked = check_head(head)
    assert isinstance(checked, Refusal) and checked.status == status and why in checked.reason
    events = GuestRequest().feed(head + b"abcd")
    assert len(events) == 1 and isinstance(events[0], Refusal), events
    assert events[0].status == status and why in events[0].reason, events[0]


@pytest.mark.parametrize("upgrade", [b"h2c", b"websocket, h2c", b"TLS/1.2"])
def test_an_upgrade_to_another_protocol_goes_as_http_1_1(upgrade: bytes) -> None:
    """h2c's streams after a 101 would each name a host, unchecked: the upstream is not asked to
    switch, and answers the request itself (Java's HttpClient and `curl --http2` send h2c on
    every plain-HTTP request and expect that)."""
    head = (
        b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: " + upgrade + b"\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
    )
    events = GuestRequest().feed(head)
    assert isinstance(events[0], Accepted) and not events[0].head.upgrade
    sent = relayed(events).lower()
    assert b"upgrade" not in sent and b"http2-settings" not in sent
    assert b"connection: close" in sent


def test_a_head_without_end_is_refused_at_the_limit() -> None:
    partial = b"GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Pad: "
    assert check_head(partial) is INCOMPLETE
    assert check_head(partial + b"a" * MAX_HEAD) == Refusal(431, "the request head is over 64 KiB")
    guest = GuestRequest()
    assert guest.feed(partial) == []
    assert guest.feed(b"") == [Refusal(400, "closed mid-head")]


def test_every_prefix_of_a_good_head_is_incomplete() -> None:
    for k in range(len(FIRST)):
        assert check_head(FIRST[:k]) is INCOMPLETE, FIRST[:k]
    assert check_head(FIRST) == RequestHead("allowed.test", b"GET", False)


def test_absolute_form_and_ports_name_the_host() -> None:
    head = b"GET http://Allowed.Test:8080/x HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n"
    assert check_head(head) == RequestHead("allowed.test", b"GET", False)
    head = b"GET http://allowed.test/x HTTP/1.0\r\n\r\n"
    assert check_head(head) == RequestHead("allowed.test", b"GET", False)


def test_upstream_gets_connection_close_but_an_upgrade_keeps_its_connection_header() -> None:
    plain = h11.Request(
        method="GET",
        target="/",
        headers=[
            ("Host", "allowed.test"),
            ("Connection", "keep-alive"),
            ("Keep-Alive", "timeout=5"),
        ],
    )
    sent = upstream_request(plain, upgrade=False).headers.raw_items()
    assert (b"Connection", b"close") in sent and (b"Keep-Alive", b"timeout=5") not in sent
    assert [n for n, _ in sent].count(b"Connection") == 1
    ws = h11.Request(
        method="GET",
        target="/ws",
        headers=[("Host", "allowed.test"), ("Connection", "Upgrade"), ("Upgrade", "websocket")],
    )
    sent = upstream_request(ws, upgrade=True).headers.raw_items()
    assert (b"Connection", b"Upgrade") in sent and (b"Upgrade", b"websocket") in sent


def test_a_refusal_is_a_complete_answer_that_closes() -> None:
    answer = refusal_bytes(403, "blocked.test is blocked (not in the allowlist)")
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(answer)
    response = client.next_event()
    assert isinstance(response, h11.Response) and response.status_code == 403
    assert (b"connection", b"close") in list(response.headers)
    assert isinstance(client.next_event(), h11.Data)
    assert isinstance(client.next_event(), h11.EndOfMessage)
