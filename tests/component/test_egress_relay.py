"""The egress proxy's relays over real loopback sockets: one checked plain-HTTP request and its
response streamed both ways (no body held whole), a WebSocket-style upgrade going raw after the
101, a broken upstream (one that closes mid-head, or answers 101 unasked) answered with 502, a
100 Continue going first and an upstream that keeps its connection ending at its length, and a
silent connection closed by the idle timeout; the kernel's relay (splice) against Python's on
the same bytes, with what the streams held already, half-closes, an upstream that ends a body
early, and a flow cut mid-relay."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import h11
import pytest

from sanbox.host.egress import relay, splice
from sanbox.host.egress.http_request import Accepted, GuestEvent, GuestRequest
from sanbox.host.egress.proxy import Flow
from sanbox.host.egress.relay import Exchange, raw

pytestmark = pytest.mark.component

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def proxied(upstream: Handler, idle: float = 30.0, kernel: bool = True) -> AsyncIterator[int]:
    """A loopback upstream and, in front of it, the proxy's HTTP path; yields the proxy's port."""

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request, events = GuestRequest(), list[GuestEvent]()
        try:
            while not events:
                events = request.feed(await reader.read(65536))
            assert isinstance(events[0], Accepted), events
            up = await asyncio.open_connection("127.0.0.1", up_port)
            try:
                exchange = Exchange(request, (reader, writer), up, kernel)
                await exchange.run(events[0], events[1:], idle)
            finally:
                up[1].close()
        except TimeoutError:
            pass
        finally:
            writer.close()

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await upstream(reader, writer)
        finally:
            writer.close()

    up_server = await asyncio.start_server(closing, "127.0.0.1", 0)
    up_port = up_server.sockets[0].getsockname()[1]
    proxy_server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    async with up_server, proxy_server:
        yield proxy_server.sockets[0].getsockname()[1]


async def exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    answer = await asyncio.wait_for(reader.read(-1), 20)
    writer.close()
    return answer


def test_bodies_stream_both_ways_and_the_answer_closes() -> None:
    size = 8 << 20
    seen: list[int] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Connection: close" in head and b"keep-alive" not in head
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        got = 0
        while got < length:
            got += len(await reader.read(65536))
        seen.append(got)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(size // 65536):
            writer.write(b"10000\r\n" + b"y" * 65536 + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def scenario() -> bytes:
        async with proxied(upstream) as port:
            head = b"POST /up HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\n"
            return await exchange(port, head + b"Content-Length: %d\r\n\r\n" % size + b"x" * size)

    with splices_counted() as moved:
        answer = asyncio.run(scenario())
    assert seen == [size]
    response, body = parse(answer)
    assert response.status_code == 200 and (b"connection", b"close") in list(response.headers)
    assert body == b"y" * size
    assert sum(moved) > size  # the chunked answer, long, in the kernel (counted in and out)


def parse(answer: bytes) -> tuple[h11.Response, bytes]:
    """The response in `answer` and its body, read as a client would."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("Host", "a.test")]))
    client.send(h11.EndOfMessage())
    client.receive_data(answer)
    client.receive_data(b"")
    response, body = client.next_event(), b""
    assert isinstance(response, h11.Response), response
    while isinstance(event := client.next_event(), h11.Data):
        body += event.data
    assert isinstance(event, h11.EndOfMessage), event
    return response, body


def test_an_upgrade_goes_raw_after_the_101() -> None:
    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Upgrade: websocket" in head and b"Connection: Upgrade" in head
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\nserver-first|"
        )
        while data := await reader.read(65536):  # an echo, raw
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    async def scenario() -> bytes:
        async with proxied(upstream) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\nframe-one|"
            )
            answer = b""
            while b"FRAME-ONE|" not in answer:
                answer += await asyncio.wait_for(reader.read(65536), 10)
            writer.write(b"frame-two")
            while not answer.endswith(b"FRAME-TWO"):
                answer += await asyncio.wait_for(reader.read(65536), 10)
            writer.close()
            return answer

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 101 ") and b"server-first|FRAME-ONE|FRAME-TWO" in answer


def test_informational_answers_without_end_are_cut_short() -> None:
    """An upstream that answers 100 Continue without end (to a guest that need not read them:
    they were written and never drained) is cut off past a few, with a 502."""

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            for _ in range(2000):
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
        writer.close()

    async def scenario() -> bytes:
        async with proxied(upstream) as port:
            return await exchange(port, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")

    answer = asyncio.run(scenario())
    assert answer.count(b"100 Continue") == relay.MOST_INFORMATIONAL
    assert b"HTTP/1.1 502 " in answer and b"the upstream answer is broken" in answer


@pytest.mark.parametrize(
    "sent",
    [
        b"SSH-2.0-not-http\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
    ],
    ids=["not-http", "closed-mid-head", "unasked-101"],
)
def test_a_broken_upstream_gets_the_guest_a_502(sent: bytes) -> None:
    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(sent)
        writer.close()

    async def scenario() -> bytes:
        async with proxied(upstream) as port:
            return await exchange(port, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 502 ") and b"the upstream answer is broken" in answer


def test_a_continue_goes_first_and_a_kept_open_upstream_ends_at_its_length() -> None:
    """An informational answer goes as it came; the final one says `Connection: close`, and the
    exchange ends at its Content-Length though the upstream keeps its connection open."""

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Expect: 100-continue" in head
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        assert await reader.readexactly(4) == b"ping"
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\npong")
        await asyncio.sleep(30)  # keeps the connection, as if it had not read Connection: close

    async def scenario() -> tuple[bytes, float]:
        async with proxied(upstream) as port:
            started = time.monotonic()
            answer = await exchange(
                port,
                b"PUT / HTTP/1.1\r\nHost: a.test\r\nExpect: 100-continue\r\n"
                b"Content-Length: 4\r\n\r\nping",
            )
            return answer, time.monotonic() - started

    answer, took = asyncio.run(scenario())
    continued = b"HTTP/1.1 100 Continue\r\n\r\n"
    assert answer.startswith(continued + b"HTTP/1.1 200 OK\r\n")
    response, body = parse(answer.removeprefix(continued))
    assert response.status_code == 200 and body == b"pong" and took < 5
    assert (b"connection", b"close") in list(response.headers)
    assert (b"connection", b"keep-alive") not in list(response.headers)


def test_a_silent_exchange_is_closed_by_the_idle_timeout() -> None:
    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome")  # then nothing
        await asyncio.sleep(30)

    async def scenario() -> tuple[bytes, float]:
        async with proxied(upstream, idle=0.5) as port:
            started = time.monotonic()
            answer = await exchange(port, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
            return answer, time.monotonic() - started

    answer, took = asyncio.run(scenario())
    assert answer.endswith(b"some") and took < 5


def test_a_raw_relay_lives_while_bytes_move_and_ends_when_idle() -> None:
    async def scenario() -> tuple[int, float]:
        a_in, a_out = await _pair()
        b_in, b_out = await _pair()
        relay = asyncio.ensure_future(raw(a_in, b_in, idle_seconds=1.5))
        started, echoed = time.monotonic(), 0
        for _ in range(6):  # 3 s of traffic, one way only: never idle
            a_out[1].write(b"tick")
            echoed += len(await b_out[0].readexactly(4))
            await asyncio.sleep(0.5)
        alive = time.monotonic() - started
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(relay, 5)
        assert time.monotonic() - started - alive < 3
        for _reader, writer in (a_in, a_out, b_in, b_out):
            writer.close()
        return echoed, alive

    echoed, alive = asyncio.run(scenario())
    assert echoed == 24 and alive >= 3


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _pair() -> tuple[Streams, Streams]:
    """Two ends of one loopback TCP connection."""
    accepted: asyncio.Future[Streams] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    near = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    far = await accepted
    server.close()
    return far, near


@contextlib.contextmanager
def splices_counted() -> Iterator[list[int]]:
    """Each `os.splice` the relays make, by bytes moved (to tell the kernel's path was taken)."""
    moved: list[int] = []
    real = os.splice

    def counting(*args: Any, **kw: Any) -> int:
        n = real(*args, **kw)
        moved.append(n)
        return n

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "splice", counting)
        yield moved


def body_upstream(size: int, sent: int | None = None) -> Handler:
    """An upstream answering with a Content-Length body of `size` bytes (a pattern that shows
    reordering), of which it sends `sent` (all by default) before closing."""
    pattern = bytes(range(251)) * (size // 251 + 1)

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = pattern[: size if sent is None else sent]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + body[:1000])
        await writer.drain()
        for at in range(1000, len(body), 300_000):
            writer.write(body[at : at + 300_000])
            await writer.drain()

    return upstream


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "python"])
def test_a_known_length_body_arrives_whole_by_either_relay(kernel: bool) -> None:
    size = 8 << 20

    async def scenario() -> bytes:
        async with proxied(body_upstream(size), kernel=kernel) as port:
            return await exchange(port, b"GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")

    with splices_counted() as moved:
        answer = asyncio.run(scenario())
    response, body = parse(answer)
    assert response.status_code == 200 and (b"connection", b"close") in list(response.headers)
    assert body == (bytes(range(251)) * (size // 251 + 1))[:size]
    assert (sum(moved) >= size - 1_000_000) if kernel else moved == []


def test_a_pipe_the_kernel_will_not_enlarge_still_relays_every_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the user's pipe allowance the kernel keeps a pipe at its default 64 KiB: each splice
    then asks for no more than that pipe holds, and the body still arrives whole."""
    real = fcntl.fcntl

    def refusing(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_SETPIPE_SZ:
            raise PermissionError(1, "Operation not permitted")
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", refusing)
    r, w, capacity = splice._pipe()
    os.close(r)
    os.close(w)
    assert capacity == 64 * 1024
    size = 4 << 20

    async def scenario() -> bytes:
        async with proxied(body_upstream(size)) as port:
            return await exchange(port, b"GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")

    with splices_counted() as moved:
        answer = asyncio.run(scenario())
    _, body = parse(answer)
    assert body == (bytes(range(251)) * (size // 251 + 1))[:size]
    assert sum(moved) >= size - 1_000_000 and max(moved) <= capacity


def test_a_body_the_upstream_ends_early_ends_the_guests_connection() -> None:
    async def scenario() -> bytes:
        async with proxied(body_upstream(1 << 20, sent=200_000)) as port:
            return await exchange(port, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")

    answer = asyncio.run(scenario())  # no hang: the guest sees a short body and the close
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and len(body) == 200_000


BULK = bytes(range(256)) * 4096  # 1 MiB


def test_a_kernel_relay_sends_what_the_streams_held_first_and_passes_half_closes() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        a_in, a_out = await _pair()
        b_in, b_out = await _pair()
        a_out[1].write(b"held-by-the-reader|")  # in a_in's buffer before the relay starts
        await a_out[1].drain()
        assert await a_in[0].readexactly(5) == b"held-"  # a check read part of it
        b_in[1].write(b"unsent|")  # in b_in's writer, going to b_out
        assert splice.spliceable(a_in, b_in)
        with splices_counted() as moved:
            relay = asyncio.ensure_future(raw(a_in, b_in, idle_seconds=10))
            a_out[1].write(b"then-spliced" + BULK)  # large enough to be spliced
            a_out[1].write_eof()  # a is done sending; b still answers
            to_b = await asyncio.wait_for(b_out[0].read(-1), 10)
            b_out[1].write(b"answer after the half-close")
            b_out[1].write_eof()
            to_a = await asyncio.wait_for(a_out[0].read(-1), 10)
            await asyncio.wait_for(relay, 10)
        assert sum(moved) > 0
        for _reader, writer in (a_in, a_out, b_in, b_out):
            writer.close()
        return to_b, to_a

    to_b, to_a = asyncio.run(scenario())
    assert to_b == b"unsent|by-the-reader|then-spliced" + BULK
    assert to_a == b"answer after the half-close"


def test_a_cut_flow_ends_its_kernel_relay_at_once() -> None:
    async def scenario() -> float:
        a_in, a_out = await _pair()
        b_in, b_out = await _pair()
        relay = asyncio.ensure_future(raw(a_in, b_in, idle_seconds=30))
        a_out[1].write(b"ping")
        assert await b_out[0].readexactly(4) == b"ping"
        started = time.monotonic()
        Flow("a.test", "127.0.0.1", 80, [a_in[1], b_in[1]]).close()  # as a policy change does
        await asyncio.wait_for(relay, 5)
        took = time.monotonic() - started
        assert await asyncio.wait_for(b_out[0].read(-1), 5) == b""  # the far ends see the end
        assert await asyncio.wait_for(a_out[0].read(-1), 5) == b""
        for _reader, writer in (a_out, b_out):
            writer.close()
        return took

    assert asyncio.run(scenario()) < 2


def test_small_and_bulk_messages_alternate_in_order_through_the_kernel_relay() -> None:
    """Short reads are copied, full ones spliced: the switch between the two keeps every byte
    in its place, both ways."""
    sizes = [1, 70_000, 5, 16_384, 16_385, 3, 1 << 20, 2]

    async def scenario() -> None:
        a_in, a_out = await _pair()
        b_in, b_out = await _pair()
        relay = asyncio.ensure_future(raw(a_in, b_in, idle_seconds=10))
        for i, size in enumerate(sizes):
            message = bytes([i % 251]) * size
            a_out[1].write(message)
            assert await asyncio.wait_for(b_out[0].readexactly(size), 10) == message
            b_out[1].write(message[::-1] + b"!")
            assert await asyncio.wait_for(a_out[0].readexactly(size + 1), 10) == message + b"!"
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay
        for _reader, writer in (a_in, a_out, b_in, b_out):
            writer.close()

    asyncio.run(scenario())
