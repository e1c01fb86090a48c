"""The DNS filter: a computer's only resolver. It answers names its allowlist lists and says
NXDOMAIN to every other name. A records are resolved upstream and the answer is built here
(only the asked name, ttl 30), so nothing an upstream says about other names reaches the
guest; AAAA and other types of an allowed name get an empty NOERROR (IPv6 is off).

Every message the guest sends first takes a token of its computer's `QueryRate` (the host's
`DnsBounds`: 100 a second, bursts of 200 by default), before it is parsed past its question or
anything is asked upstream. One past the rate is answered REFUSED: dropped, a stub resolver would
wait its whole timeout (glibc's is 5 s) and send it again; REFUSED comes back at once, a stub takes
it as this server's failure and does not ask it again at once (glibc answers EAI_AGAIN, there being
no other server), and nothing caches it as it would NXDOMAIN. It is reported through `on_denied` as
a denial of "*" ("over the DNS query rate"), which the gateway's `DenialLimiter` writes once a
minute with the count of the rest.

`serve` runs on two sockets another module creates inside the computer's namespace: UDP
datagrams and a TCP listener (length-prefixed messages). It never fails on what a client
sends, bounds every wait and closes both sockets when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from .dnsmsg import (
    CLASS_IN,
    MAX_TCP,
    MAX_UDP,
    OPCODE_QUERY,
    TYPE_A,
    DnsFormatError,
    Rcode,
    answer_a,
    empty,
    formerr,
    notimp,
    nxdomain,
    parse_query,
    refused,
    servfail,
    tcp_frame,
)
from .query_rate import QueryRate
from .resolver import ResolveError, Resolver

log = logging.getLogger(__name__)

ANSWER_TTL = 30
MAX_UDP_INFLIGHT = 64  # queries being answered at once; beyond that, reading waits
MAX_TCP_CONNECTIONS = 16  # more are closed on accept
TCP_IDLE_TIMEOUT = 10.0  # a TCP client that sends nothing for this long is closed
_FATAL_ERRNOS = {errno.EBADF, errno.ENOTSOCK, errno.EINVAL}
OVER_RATE = "over the DNS query rate"

DenyHook = Callable[[str, str], None]


class DnsFilter:
    def __init__(
        self,
        allowed: Callable[[str], bool],
        resolver: Resolver,
        on_denied: DenyHook | None = None,
        rate: QueryRate | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed = allowed
        self.resolver = resolver
        self.on_denied = on_denied
        self.rate = QueryRate() if rate is None else rate
        self.clock = clock
        self._udp_slots = asyncio.Semaphore(MAX_UDP_INFLIGHT)
        self._connections: set[socket.socket] = set()

    async def answer(self, message: bytes, max_size: int = MAX_UDP) -> bytes | None:
        """The response to one query message (None: send nothing). Never raises but
        CancelledError; bounded by the resolver's timeout."""
        over_rate = not self.rate.take(self.clock())
        try:
            query = parse_query(message)
        except DnsFormatError:
            return formerr(message)
        if over_rate:
            self._denied("*", f"{OVER_RATE} ({self.rate.rate:g} a second)")
            return refused(query)
        try:
            if query.opcode != OPCODE_QUERY:
                return notimp(query)
            if not self._allows(query.name):
                self._denied(query.name, "not in the allowlist")
                return nxdomain(query)
            if query.qtype != TYPE_A or query.qclass != CLASS_IN:
                return empty(query)
            try:
                async with asyncio.timeout(self.resolver.timeout + 1.0):
                    addresses = await self.resolver.resolve_a(query.name)
            except ResolveError as exc:
                log.debug("dns filter: %s", exc)
                if exc.rcode == Rcode.REFUSED:  # its resolver's upstream rate (resolver.py)
                    self._denied("*", f"{OVER_RATE} ({self.rate.rate:g} a second)")
                    return refused(query)
                return nxdomain(query) if exc.rcode == Rcode.NXDOMAIN else servfail(query)
            except TimeoutError:
                log.debug("dns filter: no answer for %s in time", query.name)
                return servfail(query)
            return answer_a(query, addresses, ANSWER_TTL, max_size)
        except Exception:
            log.exception("dns filter: cannot answer a query for %r", query.name)
            return servfail(query)

    async def serve(self, udp: socket.socket, tcp: socket.socket) -> None:
        """Serves DNS on a bound UDP socket and a listening TCP socket until cancelled, then
        closes both (and any open TCP connections)."""
        try:
            udp.setblocking(False)
            tcp.setblocking(False)
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._serve_udp(udp, tasks))
                tasks.create_task(self._serve_tcp(tcp, tasks))
        finally:
            udp.close()
            tcp.close()
            for conn in self._connections:  # accepted, but their task never got to run
                conn.close()
            self._connections.clear()

    def _allows(self, name: str) -> bool:
        try:
            return bool(self.allowed(name))
        except Exception:
            log.exception("dns filter: allowlist check failed for %r", name)
            return False

    def _denied(self, name: str, reason: str) -> None:
        if self.on_denied is None:
            return
        try:
            self.on_denied(name, reason)
        except Exception:
            log.exception("dns filter: on_denied hook failed")

    async def _serve_udp(self, sock: socket.socket, tasks: asyncio.TaskGroup) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._udp_slots.acquire()
            try:
                data, peer = await loop.sock_recvfrom(sock, MAX_TCP)
            except OSError as exc:
                self._udp_slots.release()
                if exc.errno in _FATAL_ERRNOS:
                    log.error("dns filter: udp socket unusable, stopped serving it: %s", exc)
                    return
                log.debug("dns filter: udp receive failed: %s", exc)
                await asyncio.sleep(0.01)
                continue
            except BaseException:
                self._udp_slots.release()
                raise
            tasks.create_task(self._udp_reply(sock, data, peer))

    async def _udp_reply(self, sock: socket.socket, data: bytes, peer: Any) -> None:
        try:
            response = await self.answer(data, MAX_UDP)
            if response is not None:
                sock.sendto(response, peer)  # non-blocking; a full buffer drops it, like UDP
        except OSError as exc:
            log.debug("dns filter: udp send failed: %s", exc)
        finally:
            self._udp_slots.release()

    async def _serve_tcp(self, sock: socket.socket, tasks: asyncio.TaskGroup) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _FATAL_ERRNOS:
                    log.error("dns filter: tcp socket unusable, stopped serving it: %s", exc)
                    return
                log.debug("dns filter: tcp accept failed: %s", exc)
                await asyncio.sleep(0.01)
                continue
            if len(self._connections) >= MAX_TCP_CONNECTIONS:
                conn.close()
                continue
            self._connections.add(conn)
            tasks.create_task(self._tcp_client(conn))

    async def _tcp_client(self, conn: socket.socket) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            conn.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=conn)
            while True:
                async with asyncio.timeout(TCP_IDLE_TIMEOUT):
                    (size,) = struct.unpack("!H", await reader.readexactly(2))
                    message = await reader.readexactly(size)
                response = await self.answer(message, MAX_TCP)
                if response is None:
                    return
                writer.write(tcp_frame(response))
                async with asyncio.timeout(TCP_IDLE_TIMEOUT):
                    await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("dns filter: tcp client closed: %r", exc)
        finally:
            self._connections.discard(conn)
            if writer is None:
                conn.close()
            else:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
