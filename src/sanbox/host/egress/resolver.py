"""A stub resolver for the DNS filter and the egress proxy: asks one upstream recursive
resolver over UDP (one retry, on a fresh socket so a fresh source port), over TCP when the
answer is truncated. Every exchange is bounded by `timeout` in all.

A records are cached for their TTL (at most `MAX_CACHE_TTL`), and concurrent lookups of one name
share a single query. Failures are not cached: the next request asks again.

A host has one resolver (its upstream and timeout); each computer's DNS filter and proxy use a
resolver made from it with `apart`, whose cache and shared queries are that computer's alone and
whose names count towards one bound for the host (name_cache.py). One computer's names never
push out another's, and the address its proxy dials is the one its own cache gave its guest.
A computer's resolver also asks upstream at most at its own `QueryRate` (the host's `DnsBounds`: 100
a second, bursts of 200, unless its operator says otherwise): its DNS filter counts the guest's
queries, and this counts every question sent upstream for it, its proxy's lookups of the names in
its HTTP and TLS requests too, so a guest opening connections to ever new names under an allowed
wildcard cannot flood the host's resolver either (a lookup past the rate fails `over the DNS query
rate`: the connection is refused as for a name that does not resolve)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import HostError
from .dns_bounds import DnsBounds
from .dnsmsg import (
    FLAG_TC,
    HEADER,
    DnsFormatError,
    Rcode,
    build_query,
    parse_query,
    parse_response,
    tcp_frame,
    with_id,
)
from .name_cache import CACHE_NAMES, CacheRoom, NameCache
from .query_rate import QueryRate

DEFAULT_UPSTREAM = ("127.0.0.1", 53)
MAX_CACHE_TTL = 300
_UDP_ATTEMPTS = 2


class ResolveError(HostError):
    """The upstream resolver said NXDOMAIN or failed (SERVFAIL, refused, timed out, malformed
    answer). `rcode` is what to tell a client: NXDOMAIN, or SERVFAIL for any failure."""

    code = "resolve_error"

    def __init__(self, message: str, rcode: int = Rcode.SERVFAIL) -> None:
        super().__init__(message)
        self.rcode = rcode


def system_upstream(resolv_conf: Path = Path("/etc/resolv.conf")) -> tuple[str, int]:
    """The first `nameserver` of resolv.conf, port 53 (127.0.0.1:53 if there is none)."""
    try:
        lines = resolv_conf.read_text(errors="replace").splitlines()
    except OSError:
        return DEFAULT_UPSTREAM
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            return fields[1], 53
    return DEFAULT_UPSTREAM


class Resolver:
    def __init__(
        self,
        upstream: tuple[str, int],
        timeout: float = 3.0,
        cache_names: int = CACHE_NAMES,
        clock: Callable[[], float] = time.monotonic,
        room: CacheRoom | None = None,
        rate: QueryRate | None = None,
        bounds: DnsBounds | None = None,
    ) -> None:
        self.upstream = upstream
        self.rate = rate  # questions sent upstream (None: the host's own, unbounded)
        self.bounds = DnsBounds() if bounds is None else bounds  # its computers' (`apart`)
        self.timeout = timeout
        self._family = socket.AF_INET6 if ":" in upstream[0] else socket.AF_INET
        self._cache = NameCache(cache_names, room)
        self._clock = clock
        self._lookups: dict[str, asyncio.Future[list[str]]] = {}

    def __repr__(self) -> str:
        return f"Resolver(upstream={self.upstream!r}, timeout={self.timeout!r})"

    @classmethod
    def of_host(cls, upstream: tuple[str, int], bounds: DnsBounds) -> Resolver:
        """A host's resolver, its computers' (`apart`) bounded by `bounds`: each keeps
        `cache_names` names, all together `host_cache_names`, and asks at `rate`."""
        room = CacheRoom(bounds.host_cache_names)
        return cls(upstream, cache_names=bounds.cache_names, room=room, bounds=bounds)

    def apart(self) -> Resolver:
        """A resolver asking the same upstream with a cache of its own (one computer's), its
        names counted in this one's host bound, its questions at the host's rate. `forget` it
        when done."""
        cache, rate = self._cache, self.bounds.query_rate()
        size, clock = cache.size, self._clock
        return Resolver(self.upstream, self.timeout, size, clock, cache.room, rate, self.bounds)

    def forget(self) -> None:
        """Drop every cached name, giving their room back to the host's bound, and cache no
        more (the computer this resolver served has gone)."""
        self._cache.close()

    async def resolve_a(self, name: str) -> list[str]:
        """The IPv4 addresses of `name` (following CNAMEs); [] if it has none."""
        name = name.lower().rstrip(".")
        cached = self._cache.get(name, self._clock())
        if cached is not None:
            return cached
        lookup = self._lookups.get(name)
        if lookup is None:
            lookup = asyncio.ensure_future(self._lookup_a(name))
            self._lookups[name] = lookup
            lookup.add_done_callback(lambda done: self._lookup_done(name, done))
        # shielded: a waiter that gives up does not cancel the query the others wait for
        return list(await asyncio.shield(lookup))

    def _lookup_done(self, name: str, lookup: asyncio.Future[list[str]]) -> None:
        if self._lookups.get(name) is lookup:
            del self._lookups[name]
        if not lookup.cancelled():
            lookup.exception()  # retrieved: every waiter may have given up

    async def _lookup_a(self, name: str) -> list[str]:
        try:
            query = build_query(name, "A")
        except DnsFormatError as exc:
            raise ResolveError(f"cannot resolve {name!r}: {exc}", Rcode.NXDOMAIN) from None
        raw = await self._exchange(query, f"A {name}")
        try:
            response = parse_response(raw)
        except DnsFormatError as exc:
            raise ResolveError(f"malformed answer for {name} from {self._where}: {exc}") from None
        if response.rcode == Rcode.NXDOMAIN:
            raise ResolveError(f"NXDOMAIN for {name}", Rcode.NXDOMAIN)
        if response.rcode != Rcode.NOERROR:
            raise ResolveError(f"{_rcode_name(response.rcode)} for {name} from {self._where}")
        ttl = min(response.ttl, MAX_CACHE_TTL) if response.ttl < 2**31 else 0  # RFC 2181 8
        if response.addresses and ttl > 0:
            now = self._clock()
            self._cache.put(name, response.addresses, now + ttl, now)
        return response.addresses

    async def forward(self, query: bytes) -> bytes:
        """Relays a raw query upstream (under a fresh id) and returns the raw answer, with the
        query's id put back."""
        parsed = parse_query(query)  # DnsFormatError for a malformed query
        fresh = with_id(query, _random_id())
        answer = await self._exchange(fresh, f"{parsed.qtype} {parsed.name}")
        return with_id(answer, parsed.id)

    @property
    def _where(self) -> str:
        return f"{self.upstream[0]}:{self.upstream[1]}"

    async def _exchange(self, query: bytes, what: str) -> bytes:
        if self.rate is not None and not self.rate.take(self._clock()):
            raise ResolveError(f"{what} not asked: over the DNS query rate", Rcode.REFUSED)
        try:
            async with asyncio.timeout(self.timeout):
                answer = None
                for attempt in range(_UDP_ATTEMPTS):
                    budget = self.timeout / _UDP_ATTEMPTS
                    try:
                        async with asyncio.timeout(budget):
                            answer = await self._udp(query)
                        break
                    except (TimeoutError, OSError):
                        if attempt + 1 == _UDP_ATTEMPTS:
                            raise
                assert answer is not None
                if struct.unpack_from("!H", answer, 2)[0] & FLAG_TC:
                    answer = await self._tcp(query)
                return answer
        except TimeoutError:
            raise ResolveError(f"no answer for {what} from {self._where} in time") from None
        except OSError as exc:
            raise ResolveError(f"cannot ask {self._where} for {what}: {exc}") from None

    async def _udp(self, query: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        with socket.socket(self._family, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            await loop.sock_connect(sock, self.upstream)
            await loop.sock_sendall(sock, query)
            while True:  # ignore datagrams that do not answer this query
                answer = await loop.sock_recv(sock, 65535)
                if _answers(query, answer):
                    return answer

    async def _tcp(self, query: bytes) -> bytes:
        reader, writer = await asyncio.open_connection(self.upstream[0], self.upstream[1])
        try:
            writer.write(tcp_frame(query))
            await writer.drain()
            while True:
                (size,) = struct.unpack("!H", await reader.readexactly(2))
                answer = await reader.readexactly(size)
                if _answers(query, answer):
                    return answer
        except asyncio.IncompleteReadError as exc:
            raise ConnectionResetError("connection closed mid-answer") from exc
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _answers(query: bytes, answer: bytes) -> bool:
    """Whether `answer` is a response to `query`: same id, same question."""
    if len(answer) < HEADER.size or answer[:2] != query[:2]:
        return False
    try:
        response = parse_response(answer)
        asked = parse_query(query)
    except DnsFormatError:
        return False
    return response.name in (None, asked.name) and response.qtype in (None, asked.qtype)


def _random_id() -> int:
    return secrets.randbelow(0x10000)


def _rcode_name(rcode: int) -> str:
    try:
        return Rcode(rcode).name
    except ValueError:
        return f"rcode {rcode}"
