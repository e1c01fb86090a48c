"""Moving bytes between a computer and the upstream it was allowed to reach, bounded in time and
memory: `raw` relays both ways (TLS passthrough, `cidr:port` flows, after a protocol switch);
`Exchange` carries one checked plain-HTTP request (parsed by h11) and its response (only its
head read), streaming bodies chunk by chunk. Both end when no byte moved either way for the idle
timeout (give or take a second: the deadline is pushed back at most once a second).

Between two plain TCP sockets, the bytes that need no more checking (a raw flow, a response
body of known length) move in the kernel (splice.py), unless `kernel=False` asks for the
relay through Python (kept for the benchmark's before-and-after and as the fallback)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import h11

from . import splice
from .http_request import (
    Accepted,
    GuestEvent,
    GuestRequest,
    Refusal,
    bodiless,
    body_bytes,
    head_bytes,
    is_chunked,
    refusal_bytes,
    upstream_request,
)
from .http_response import (
    NO_BODY,
    UNTIL_CLOSE,
    BrokenAnswerError,
    ResponseHead,
    read_head,
)
from .sniff import INCOMPLETE

CHUNK = 64 * 1024
IDLE_TIMEOUT = 300.0
MOST_INFORMATIONAL = 16  # 1xx answers before the final one (100 Continue, 103 Early Hints)


class Idle:
    """The deadline of a relay, pushed back whenever a byte moves (at most once a second)."""

    def __init__(self, timeout: asyncio.Timeout, seconds: float) -> None:
        self._timeout, self.seconds = timeout, seconds
        self._loop = asyncio.get_running_loop()
        self._pushed = self._loop.time()

    def touch(self) -> None:
        now = self._loop.time()
        if now - self._pushed >= 1.0:
            self._timeout.reschedule(now + self.seconds)
            self._pushed = now


@contextlib.asynccontextmanager
async def idle_timeout(seconds: float) -> AsyncIterator[Idle]:
    """TimeoutError out of the block once nothing moved for `seconds`."""
    async with asyncio.timeout(seconds) as timeout:
        yield Idle(timeout, seconds)


async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, idle: Idle) -> None:
    try:
        while data := await src.read(CHUNK):
            idle.touch()
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        dst.close()


async def raw(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    idle_seconds: float = IDLE_TIMEOUT,
    kernel: bool = True,
) -> None:
    async with idle_timeout(idle_seconds) as idle:
        await both_ways(a, b, idle, kernel)


async def both_ways(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    idle: Idle,
    kernel: bool,
) -> None:
    if kernel and splice.spliceable(a, b):
        await splice.both_ways(a, b, idle.touch)
    else:
        await asyncio.gather(pump(a[0], b[1], idle), pump(b[0], a[1], idle))


class BrokenExchangeError(Exception):
    """The guest or the upstream broke HTTP mid-exchange: close both."""


class Exchange:
    """One checked request from the guest (its `Accepted` event and whatever followed it in the
    same read) to an open upstream connection, and the response back. The request goes as h11
    parsed it (`head_bytes`, `body_bytes`); of the response only the head is read
    (`http_response.py`), its body relayed as it comes to the length it states or until the
    upstream closes."""

    def __init__(
        self,
        guest: GuestRequest,
        guest_io: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream_io: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        kernel: bool = True,
    ) -> None:
        self.guest = guest
        self.kernel = kernel
        self.guest_io = guest_io
        self.guest_reader, self.guest_writer = guest_io
        self.head_request = False
        self.upgrade = False  # the request asked to switch protocols (a 101 may answer it)
        self.chunked = False  # the request's body goes upstream in chunks
        self.answered = False  # the guest has the head of a final response
        self.up_reader, self.up_writer = upstream_io
        self.held = b""  # read from the upstream past the head being relayed

    async def run(self, accepted: Accepted, pending: list[GuestEvent], idle_seconds: float) -> None:
        async with idle_timeout(idle_seconds) as idle:
            request = upstream_request(accepted.request, accepted.head.upgrade)
            self.head_request = request.method == b"HEAD"
            self.upgrade = accepted.head.upgrade
            self.chunked = is_chunked(request)
            self.up_writer.write(head_bytes(request))
            sending = None
            if not bodiless(pending):  # a bodiless request ended with its head
                sending = asyncio.ensure_future(self._request_body(pending, idle))
            try:
                switched = await self._response(idle)
            except (BrokenAnswerError, BrokenExchangeError):
                if not self.answered:
                    self.guest_writer.write(refusal_bytes(502, "the upstream answer is broken"))
                return
            finally:  # an early answer (413, say) ends the exchange before the body does
                if sending is not None:
                    sending.cancel()
                    await asyncio.wait([sending])
                    if not sending.cancelled():
                        sending.exception()  # retrieved: a broken guest side ends the exchange
            if switched:
                await self._switched(idle)

    async def _request_body(self, events: list[GuestEvent], idle: Idle) -> None:
        while True:
            for event in events:
                if isinstance(event, h11.Data | h11.EndOfMessage):
                    self.up_writer.write(body_bytes(event, self.chunked))
                    if isinstance(event, h11.EndOfMessage):
                        await self.up_writer.drain()
                        return  # what the guest sends after its request is not read
                elif isinstance(event, Refusal | h11.ConnectionClosed):
                    self.up_writer.close()  # a truncated or broken body: the upstream sees EOF
                    return
            await self.up_writer.drain()
            data = await self.guest_reader.read(CHUNK)
            idle.touch()
            events = self.guest.feed(data)

    async def _head(self, idle: Idle) -> ResponseHead:
        """The next response head from the upstream; what came after it stays in `held`."""
        while (head := read_head(self.held)) is INCOMPLETE:
            data = await self.up_reader.read(CHUNK)
            if not data:
                raise BrokenExchangeError("the upstream closed before its answer's head ended")
            idle.touch()
            self.held += data
        assert isinstance(head, ResponseHead)
        self.held = self.held[head.size :]
        return head

    async def _response(self, idle: Idle) -> bool:
        """Relay the response; True if the upstream switched protocols (101)."""
        informational = 0
        while (head := await self._head(idle)).informational:
            if head.status == 101 and not self.upgrade:  # raw bytes on an answer not asked for
                raise BrokenAnswerError("a 101 to a request that asked for no upgrade")
            informational += 1
            if informational > MOST_INFORMATIONAL:
                raise BrokenAnswerError("informational answers without end")
            self.guest_writer.write(head.for_guest())  # 100 Continue, 103 Early Hints, ...
            if head.status == 101:
                return True
            await self.guest_writer.drain()  # a guest that does not read holds them upstream
        length = head.body(self.head_request)
        self.guest_writer.write(head.for_guest())
        self.answered = True
        if length == UNTIL_CLOSE:
            await self._body_until_close(idle)
        elif length != NO_BODY:
            await self._body(length, idle)
        await self.guest_writer.drain()
        return False

    async def _body(self, length: int, idle: Idle) -> None:
        """`length` bytes of body: what was read with the head, then the rest, socket to socket
        in the kernel when it is large (64 KiB or more) and both sides are plain sockets."""
        first, self.held = self.held[:length], b""
        self.guest_writer.write(first)
        left = length - len(first)
        upstream = (self.up_reader, self.up_writer)
        if self.kernel and left >= CHUNK and splice.spliceable(upstream, self.guest_io):
            left -= await splice.exactly(upstream, self.guest_io, left, idle.touch)
        else:  # the upstream's transport reads no more after a splice: all of it is there
            while left > 0 and (data := await self.up_reader.read(min(CHUNK, left))):
                idle.touch()
                self.guest_writer.write(data)
                await self.guest_writer.drain()
                left -= len(data)
        if left > 0:
            raise BrokenExchangeError(f"upstream ended the body {left} bytes short of {length}")

    async def _body_until_close(self, idle: Idle) -> None:
        """A body in chunks or unframed: everything the upstream sends until it closes; once a
        read comes back full (a long body), the rest in the kernel between plain sockets."""
        self.guest_writer.write(self.held)
        self.held = b""
        upstream = (self.up_reader, self.up_writer)
        kernel = self.kernel and splice.spliceable(upstream, self.guest_io)
        while data := await self.up_reader.read(CHUNK):
            idle.touch()
            self.guest_writer.write(data)
            await self.guest_writer.drain()
            if kernel and len(data) == CHUNK:
                await splice.until_eof(upstream, self.guest_io, idle.touch)
                return

    async def _switched(self, idle: Idle) -> None:
        """After a 101: what each side sent past its head goes on, then raw bytes both ways."""
        to_upstream, _ = self.guest.conn.trailing_data
        if to_upstream:
            self.up_writer.write(to_upstream)
        if self.held:
            self.guest_writer.write(self.held)
            self.held = b""
        await both_ways(self.guest_io, (self.up_reader, self.up_writer), idle, self.kernel)
