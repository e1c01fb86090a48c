"""The secret proxy: a guest's TLS connection to a host that a bound secret lists, terminated here
with a certificate minted for that host by the org's CA (which the guest trusts), carried
upstream over a TLS connection of the proxy's own that verifies the host's certificate, with the
secret added to each request's headers (`injection.py`) so the guest never holds it.

HTTP/1.1 only (ALPN offers nothing else; an HTTP/2 preface is refused). Every request on a kept-
alive connection is checked on its own (`http_request.py`), must name the host of the SNI (else
421), and gets the secrets bound at that moment: a secret removed or rotated changes the next
request. TRACE and TRACK are refused (`secret_exchange.py`). The upstream connection is kept alive
between requests when both sides allow, reopened when it closed; a bodiless idempotent request whose
kept-alive upstream closed as it was sent (before any answer) is sent once more on a new one, as a
browser would. Bodies stream both ways chunk by chunk; responses go back as they are (a redirect is
not followed), hop-by-hop headers dropped; after a 101 the bytes go raw both ways. Secret values
never reach a log line, an error or an answer, and never come back: every response's head and body
(and the raw bytes after a 101) go through a `LeakScanner` for the values that apply to the host;
one that carries a value is answered 502 if nothing of it has gone to the guest yet (the head and
what came with it are held until scanned), else the connection is cut, and either way it is reported
as a denial."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

import h11

from .http_request import (
    MAX_HEAD,
    Accepted,
    GuestEvent,
    GuestRequest,
    Refusal,
    bodiless,
    refusal_bytes,
)
from .injection import applies, inject, placeholder_refusal
from .interception import Interception, RefusedError
from .leak_scan import LEAK_REASON, LeakScanner
from .org_ca import MintRefusedError
from .relay import Idle, idle_timeout
from .secret_exchange import (
    METHOD_REFUSAL,
    REFUSED_METHODS,
    guest_response,
    unscannable,
    upstream_headers,
)
from .switched import relay_switched
from .tls_server import CHUNK, HANDSHAKE_TIMEOUT, TlsServerStream
from .traffic import Traffic

log = logging.getLogger(__name__)
CONNECT_TIMEOUT = 10.0
H2_PREFACE = b"PRI * HTTP/2.0\r\n"
IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE"})
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
__all__ = ["Interception", "RefusedError", "Streams", "intercept"]


async def intercept(
    guest: Streams,
    head: bytes,
    name: str,
    address: str,
    interception: Interception,
    idle_seconds: float,
    *,
    port: int = 443,
    writers: list[asyncio.StreamWriter] | None = None,
    traffic: Traffic | None = None,
) -> None:
    """Serve the guest's TLS connection to `name`, whose ClientHello is `head`, dialling `address`
    upstream. RefusedError once a refusal was answered; `writers` (the proxy's flow) is kept
    holding the guest's writer and the open upstream's, so closing them ends the connection."""
    try:
        context = await interception.server_context(name)
    except MintRefusedError as exc:
        raise RefusedError(name, f"no certificate minted: {exc}", 429) from None
    tls = TlsServerStream(*guest, context)
    try:
        await tls.handshake(head, HANDSHAKE_TIMEOUT)
    except (ssl.SSLError, ConnectionError, TimeoutError) as exc:
        why = getattr(exc, "reason", None) or type(exc).__name__
        raise RefusedError(name, f"the guest did not complete TLS ({why})", 502) from None
    writers = writers if writers is not None else []
    writers[:] = [guest[1]]
    session = _Session(tls, name, (address, port), interception, writers, traffic or Traffic())
    try:
        async with idle_timeout(idle_seconds) as idle:
            await session.run(idle)
    except (RefusedError, TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        raise
    except (OSError, h11.ProtocolError) as exc:  # OSError: ssl.SSLError included
        log.info("secret proxy for %s ended: %s", name, type(exc).__name__)
    except Exception as exc:  # never the exception's text: it could hold a header
        log.error("secret proxy for %s failed: %s", name, type(exc).__name__)
    finally:
        session.close()


class _BrokenUpstreamError(Exception):
    """The upstream broke HTTP mid-exchange."""


class _Session:
    """One guest connection's requests, one after the other, over one upstream at a time."""

    def __init__(
        self,
        tls: TlsServerStream,
        name: str,
        target: tuple[str, int],
        interception: Interception,
        writers: list[asyncio.StreamWriter],
        traffic: Traffic,
    ) -> None:
        self.tls, self.name, self.target, self.interception = tls, name, target, interception
        self.traffic = traffic  # the computer's upstream bytes
        self.writers = writers  # [the guest's, the open upstream's]
        self.upstream: Streams | None = None
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)

    async def run(self, idle: Idle) -> None:
        pending = b""
        while True:
            request = GuestRequest()
            first = await self._request_head(request, pending, idle)
            if first is None:
                return  # the guest closed between requests
            accepted, events = first
            headers, scanner = await self._headers(accepted)
            replayable = accepted.request.method in IDEMPOTENT and bodiless(events)
            for attempt in (1, 2):
                reused = await self._ensure_upstream()
                try:
                    out = h11.Request(
                        method=accepted.request.method,
                        headers=headers,
                        target=accepted.request.target,
                    )
                    self._upstream()[1].write(self.conn.send(out) or b"")
                except h11.LocalProtocolError:  # its text could hold the value
                    raise await self._refuse(502, "the request cannot be sent upstream") from None
                sending = None
                if bodiless(events):  # its end goes with its head: no body to stream
                    self._upstream()[1].write(self.conn.send(h11.EndOfMessage()) or b"")
                else:
                    sending = asyncio.ensure_future(self._request_body(request, events, idle))
                try:
                    switched = await self._response(request, idle, scanner)
                    break
                except (h11.ProtocolError, _BrokenUpstreamError):
                    if request.conn.our_state is not h11.SEND_RESPONSE:
                        return  # the guest has part of an answer: only closing is left
                    if not (reused and replayable and attempt == 1):
                        raise await self._refuse(502, "the upstream answer is broken") from None
                    self._drop_upstream()  # it closed as the request went: once more, anew
                finally:
                    if sending is not None:
                        await _settle(sending, keep=self.conn.our_state is h11.DONE)
            if switched:
                await self._switched(request, idle, scanner)
                return
            if not request.complete or request.conn.our_state is not h11.DONE:
                return  # the guest asked to close, or its body was cut short
            pending = request.conn.trailing_data[0]
            self._next_upstream_cycle()

    async def _request_head(
        self, request: GuestRequest, pending: bytes, idle: Idle
    ) -> tuple[Accepted, list[GuestEvent]] | None:
        """The next request, checked and allowed (else refused), with the events that came with
        its head; None if the guest closed before sending one."""
        seen, events = pending, request.feed(pending) if pending else []
        while not events:
            data = await self.tls.read(CHUNK)
            idle.touch()
            if not data:
                return None  # gone (mid-head too: nothing was asked, nothing is refused)
            seen = (seen + data)[: len(H2_PREFACE)]
            events = request.feed(data)
        first = events[0]
        if isinstance(first, Refusal):
            if seen.startswith(H2_PREFACE):
                raise await self._refuse(
                    505, "HTTP/2 is not offered on hosts with secrets: use HTTP/1.1"
                )
            raise await self._refuse(first.status, first.reason)
        assert isinstance(first, Accepted)
        if first.head.name != self.name:
            why = f"the request names {first.head.name}, this TLS connection is for {self.name}"
            raise await self._refuse(421, why)
        if first.request.method in REFUSED_METHODS:
            raise await self._refuse(405, METHOD_REFUSAL)
        return first, events[1:]

    async def _headers(self, accepted: Accepted) -> tuple[list[tuple[bytes, bytes]], LeakScanner]:
        """The request's headers as they go upstream (`secret_exchange.upstream_headers`, then
        the secrets in), and the scanner its response goes through."""
        injections = self.interception.injections()
        scanner = LeakScanner(
            known=(f for i in injections if applies(i, self.name) for f in i.forms)
        )
        raw = list(accepted.request.headers.raw_items())
        headers = upstream_headers(raw, accepted.head.upgrade, scanned=not scanner.idle)
        if self.interception.strict_placeholders:
            why = placeholder_refusal(headers, self.name, injections)
            if why is not None:
                raise await self._refuse(403, why)
        return inject(headers, self.name, injections), scanner

    async def _request_body(
        self, request: GuestRequest, events: list[GuestEvent], idle: Idle
    ) -> None:
        _, up_writer = self._upstream()
        while True:
            for event in events:
                if isinstance(event, h11.Data | h11.EndOfMessage):
                    up_writer.write(self.conn.send(event) or b"")
                    if isinstance(event, h11.EndOfMessage):
                        await up_writer.drain()
                        return
                elif isinstance(event, Refusal | h11.ConnectionClosed):
                    up_writer.close()  # a truncated or broken body: the upstream sees EOF
                    return
            await up_writer.drain()
            data = await self.tls.read(CHUNK)
            idle.touch()
            events = request.feed(data)

    async def _response(self, request: GuestRequest, idle: Idle, scanner: LeakScanner) -> bool:
        """Relay the response through `scanner`; True if the upstream switched protocols (101).
        What h11 gives in one read is scanned before any of it is written."""
        up_reader, _ = self._upstream()
        answer, method = request.conn, self._method(request)
        out, started = b"", False  # not yet written; the final head was written
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                if out:
                    self.tls.write(out)
                    out, started = b"", started or answer.our_state is not h11.SEND_RESPONSE
                    await self.tls.drain()
                data = await up_reader.read(CHUNK)
                idle.touch()
                self.conn.receive_data(data)
                continue
            heads = h11.InformationalResponse | h11.Response
            if isinstance(event, heads) and scanner.head(event.reason, event.headers.raw_items()):
                raise await self._leak(started)
            if isinstance(event, h11.InformationalResponse):
                out += answer.send(event) or b""
                if event.status_code == 101:
                    self.tls.write(out)
                    return True
            elif isinstance(event, h11.Response):
                why = None if scanner.idle else unscannable(event, method)
                if why is not None:
                    raise await self._refuse(502, why)
                out += answer.send(guest_response(event)) or b""
            elif isinstance(event, h11.Data):
                released = scanner.feed(event.data)
                if released is None:
                    raise await self._leak(started)
                out += answer.send(h11.Data(data=released)) or b"" if released else b""
            elif isinstance(event, h11.EndOfMessage):
                if scanner.head(b"", event.headers.raw_items()):  # the trailers
                    raise await self._leak(started)
                rest = scanner.finish()
                out += answer.send(h11.Data(data=rest)) or b"" if rest else b""
                self.tls.write(out + (answer.send(event) or b""))
                await self.tls.drain()
                return False
            else:  # closed before a complete response, or paused without one
                raise _BrokenUpstreamError(type(event).__name__)

    @staticmethod
    def _method(request: GuestRequest) -> bytes:
        return request.head.method if request.head is not None else b""

    async def _leak(self, started: bool) -> RefusedError:
        """A value is in the response: 502 if the guest has nothing of it yet, else the
        connection is cut (the caller closes it); the error to raise, value-free."""
        if not started:
            return await self._refuse(502, LEAK_REASON)
        return RefusedError(self.name, LEAK_REASON, 502)

    async def _switched(self, request: GuestRequest, idle: Idle, scanner: LeakScanner) -> None:
        """After a 101: raw bytes both ways (switched.py); a value coming down cuts it."""
        trailing = (request.conn.trailing_data[0], self.conn.trailing_data[0])
        if await relay_switched(self.tls, self._upstream(), trailing, idle, scanner):
            raise RefusedError(self.name, LEAK_REASON, 502)

    async def _ensure_upstream(self) -> bool:
        """An upstream connection: True if it is one kept alive from an earlier request."""
        if self.upstream is not None:
            reader, writer = self.upstream
            if not reader.at_eof() and not writer.is_closing():
                return True
        self._drop_upstream()
        address, port = self.target
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                self.upstream = await asyncio.open_connection(
                    address,
                    port,
                    ssl=self.interception.upstream_context,
                    server_hostname=self.name,
                    ssl_handshake_timeout=CONNECT_TIMEOUT,
                )
        except ssl.SSLCertVerificationError as exc:
            why = f"the certificate of {self.name} is not trusted ({exc.verify_message})"
            raise await self._refuse(502, why) from None
        except ssl.SSLError as exc:
            why = f"TLS with {self.name} failed ({exc.reason or type(exc).__name__})"
            raise await self._refuse(502, why) from None
        except (OSError, TimeoutError) as exc:
            raise await self._refuse(502, f"cannot connect: {exc}") from None
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.writers[1:] = [self.upstream[1]]
        self.traffic.opened(self.upstream[1])
        return False

    def _upstream(self) -> Streams:
        assert self.upstream is not None
        return self.upstream

    def _next_upstream_cycle(self) -> None:
        """Keep the upstream for the next request if both ends agree, else drop it."""
        if (
            self.conn.our_state is h11.DONE
            and self.conn.their_state is h11.DONE
            and not any(self.conn.trailing_data)
        ):
            self.conn.start_next_cycle()
        else:
            self._drop_upstream()

    def _drop_upstream(self) -> None:
        if self.upstream is not None:
            self.traffic.closing(self.upstream[1])
            self.upstream[1].close()
            self.upstream = None
            del self.writers[1:]

    async def _refuse(self, status: int, reason: str) -> RefusedError:
        """Answer the guest `status` over TLS; the error to raise, for the proxy to report."""
        refused = RefusedError(self.name, reason, status)
        with contextlib.suppress(ConnectionError, OSError):
            self.tls.write(refusal_bytes(status, refused.answer()))
            await self.tls.drain()
        return refused

    def close(self) -> None:
        self._drop_upstream()
        self.tls.close()


async def _settle(sending: asyncio.Future[None], keep: bool) -> None:
    """End the request body's task: let it finish draining if the whole body went (`keep`),
    else cancel it (an early answer, or a broken exchange)."""
    if not keep:
        sending.cancel()
    await asyncio.wait([sending])
    if not sending.cancelled():
        sending.exception()  # retrieved: a broken guest side ends the connection below
