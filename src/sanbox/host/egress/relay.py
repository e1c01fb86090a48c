"""Moving bytes between a computer and the upstream it was allowed to reach, bounded in time and
memory: `raw` relays both ways (TLS passthrough, `cidr:port` flows, after a protocol switch);
`Exchange` carries one checked plain-HTTP request and its response through h11 on both sides,
streaming bodies chunk by chunk. Both end when no byte moved either way for the idle timeout
(give or take a second: the deadline is pushed back at most once a second).

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
    MAX_HEAD,
    Accepted,
    GuestEvent,
    GuestRequest,
    Refusal,
    bodiless,
    guest_response,
    refusal_bytes,
    upstream_request,
)

CHUNK = 64 * 1024
IDLE_TIMEOUT = 300.0


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
    same read) to an open upstream connection, and the response back."""

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
        self.up_reader, self.up_writer = upstream_io
        self.upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)

    async def run(self, accepted: Accepted, pending: list[GuestEvent], idle_seconds: float) -> None:
        async with idle_timeout(idle_seconds) as idle:
            request = upstream_request(accepted.request, accepted.head.upgrade)
            self.head_request = request.method == b"HEAD"
            self.up_writer.write(self.upstream.send(request) or b"")
            sending = None
            if bodiless(pending):  # its end goes with its head: no body to stream
                self.up_writer.write(self.upstream.send(h11.EndOfMessage()) or b"")
            else:
                sending = asyncio.ensure_future(self._request_body(pending, idle))
            try:
                switched = await self._response(idle)
            except (h11.ProtocolError, BrokenExchangeError):
                if self.guest.conn.our_state is h11.SEND_RESPONSE:
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
                    self.up_writer.write(self.upstream.send(event) or b"")
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

    async def _response(self, idle: Idle) -> bool:
        """Relay the response; True if the upstream switched protocols (101)."""
        answer = self.guest.conn
        while True:
            event = self.upstream.next_event()
            if event is h11.NEED_DATA:
                data = await self.up_reader.read(CHUNK)
                idle.touch()
                self.upstream.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                self.guest_writer.write(answer.send(event) or b"")
                if event.status_code == 101:
                    return True
            elif isinstance(event, h11.Response):
                self.guest_writer.write(answer.send(guest_response(event)) or b"")
                length = self._kernel_body(event)
                if length is not None:
                    await self._body_in_kernel(length, idle)
                    return False
            elif isinstance(event, h11.Data):
                self.guest_writer.write(answer.send(event) or b"")
                await self.guest_writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                self.guest_writer.write(answer.send(event) or b"")
                await self.guest_writer.drain()
                return False
            else:  # closed before a complete response, or paused without one
                raise BrokenExchangeError(f"upstream ended the exchange: {event!r}")

    def _kernel_body(self, response: h11.Response) -> int | None:
        """The length of a body the kernel can relay as it is: a Content-Length, one, of 64 KiB
        or more, and no Transfer-Encoding, on a response that has a body, between plain
        sockets. None: h11 relays it (small, chunked, until close, or TLS on a side)."""
        if not self.kernel or self.head_request or response.status_code in (204, 304):
            return None
        lengths = [v for n, v in response.headers if n == b"content-length"]
        if len(lengths) != 1 or any(n == b"transfer-encoding" for n, _ in response.headers):
            return None
        length = int(lengths[0])  # h11 checked it is digits
        if length < CHUNK:  # a small body costs less through h11 than setting up a splice
            return None
        if not splice.spliceable((self.up_reader, self.up_writer), self.guest_io):
            return None
        return length

    async def _body_in_kernel(self, length: int, idle: Idle) -> None:
        """The body h11 holds already, then the rest socket to socket."""
        moved = 0
        while moved < length:
            event = self.upstream.next_event()
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.EndOfMessage):
                return
            if not isinstance(event, h11.Data):
                raise BrokenExchangeError(f"upstream ended the exchange: {event!r}")
            self.guest_writer.write(bytes(event.data))
            moved += len(event.data)
        upstream = (self.up_reader, self.up_writer)
        moved += await splice.exactly(upstream, self.guest_io, length - moved, idle.touch)
        if moved < length:
            raise BrokenExchangeError(f"upstream ended the body after {moved} of {length} bytes")

    async def _switched(self, idle: Idle) -> None:
        """After a 101: what each side sent past its head goes on, then raw bytes both ways."""
        to_upstream, _ = self.guest.conn.trailing_data
        to_guest, _ = self.upstream.trailing_data
        if to_upstream:
            self.up_writer.write(to_upstream)
        if to_guest:
            self.guest_writer.write(to_guest)
        await both_ways(self.guest_io, (self.up_reader, self.up_writer), idle, self.kernel)
