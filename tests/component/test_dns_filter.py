"""The DNS filter and the resolver against a tiny upstream DNS server on 127.0.0.1 (built with
the same codec), queried over UDP and TCP like a guest would."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import pytest

from sanbox.host.egress import DnsFilter, ResolveError, Resolver
from sanbox.host.egress.dnsmsg import (
    CLASS_IN,
    FLAG_QR,
    FLAG_TC,
    HEADER,
    TYPE_A,
    Rcode,
    answer_a,
    build_query,
    empty,
    encode_name,
    nxdomain,
    parse_query,
    parse_response,
    servfail,
    tcp_frame,
)

pytestmark = pytest.mark.component

RECORDS = {
    "allowed.test": ["192.0.2.10", "192.0.2.11"],
    "other.test": ["192.0.2.20"],
}
MANY = [f"198.51.100.{i}" for i in range(1, 60)]  # too many for 512 bytes: TC over UDP
TIMEOUT = 0.4  # for the tests of an upstream that does not answer
PATIENT = 10.0  # for the others: a loaded machine may take more than TIMEOUT to answer


def upstream_answer(data: bytes, over_udp: bool) -> bytes | None:
    query = parse_query(data)
    if query.name == "silent.test":
        return None
    if query.name == "fail.test":
        return servfail(query)
    if query.name == "many.test":
        if over_udp:
            resp = bytearray(empty(query))
            resp[2] |= FLAG_TC >> 8
            return bytes(resp)
        return answer_a(query, MANY, ttl=300)
    if query.name == "sneaky.test":  # an extra record for a name nobody asked about
        resp = bytearray(answer_a(query, ["192.0.2.30"], ttl=300))
        struct.pack_into("!H", resp, 6, 2)
        extra = encode_name("evil.test") + struct.pack("!HHIH", TYPE_A, CLASS_IN, 300, 4)
        return bytes(resp) + extra + bytes([6, 6, 6, 6])
    if query.name == "fleeting.test":  # TTL 0: use once, never keep
        return answer_a(query, ["192.0.2.40"], ttl=0)
    if query.name in RECORDS:
        if query.qtype != TYPE_A:
            return empty(query)
        return answer_a(query, RECORDS[query.name], ttl=300)
    return nxdomain(query)


@dataclass
class Upstream(asyncio.DatagramProtocol):
    asked: list[str] = field(default_factory=list)
    transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        self.asked.append(parse_query(data).name)
        resp = upstream_answer(data, over_udp=True)
        if resp is not None and self.transport is not None:
            self.transport.sendto(resp, addr)

    async def tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (size,) = struct.unpack("!H", await reader.readexactly(2))
            data = await reader.readexactly(size)
            self.asked.append("tcp:" + parse_query(data).name)
            resp = upstream_answer(data, over_udp=False)
            if resp is not None:
                writer.write(tcp_frame(resp))
                await writer.drain()
        finally:
            writer.close()
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def upstream_server() -> AsyncIterator[tuple[Upstream, tuple[str, int]]]:
    """One port for UDP and TCP, as a resolver has: the kernel picks a free UDP port,
    whose TCP twin may be taken by another socket of the machine; then pick again."""
    loop = asyncio.get_running_loop()
    proto = Upstream()
    for attempt in range(20):
        transport, _ = await loop.create_datagram_endpoint(
            lambda: proto, local_addr=("127.0.0.1", 0)
        )
        port = transport.get_extra_info("sockname")[1]
        try:
            server = await asyncio.start_server(proto.tcp_client, "127.0.0.1", port)
            break
        except OSError as e:
            transport.close()
            if e.errno != errno.EADDRINUSE or attempt == 19:
                raise
    try:
        yield proto, ("127.0.0.1", port)
    finally:
        transport.close()
        server.close()
        await server.wait_closed()


@dataclass
class Running:
    udp: tuple[str, int]
    tcp: tuple[str, int]
    denied: list[tuple[str, str]]


@contextlib.asynccontextmanager
async def dns_filter(
    upstream: tuple[str, int],
    timeout: float = PATIENT,
) -> AsyncIterator[Running]:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    denied: list[tuple[str, str]] = []
    allowed = {"allowed.test", "many.test", "sneaky.test", "fail.test", "silent.test", "nx.test"}
    dns = DnsFilter(
        allowed.__contains__,
        Resolver(upstream, timeout=timeout),
        on_denied=lambda name, reason: denied.append((name, reason)),
    )
    running = Running(udp.getsockname(), tcp.getsockname(), denied)
    task = asyncio.create_task(dns.serve(udp, tcp))
    try:
        yield running
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert udp.fileno() == -1 and tcp.fileno() == -1


async def ask_udp(addr: tuple[str, int], wire: bytes, wait: float = PATIENT) -> bytes:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, addr)
        await loop.sock_sendall(sock, wire)
        return await asyncio.wait_for(loop.sock_recv(sock, 65535), wait)


async def ask_tcp(addr: tuple[str, int], wire: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*addr)
    try:
        writer.write(tcp_frame(wire))
        await writer.drain()
        (size,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), PATIENT))
        return await asyncio.wait_for(reader.readexactly(size), PATIENT)
    finally:
        writer.close()
        await writer.wait_closed()


Ask = Callable[[tuple[str, int], bytes], Awaitable[bytes]]


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        await asyncio.wait_for(body(), 10)

    asyncio.run(main())


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_allowed_denied_and_aaaa(transport: str) -> None:
    async def body() -> None:
        async with upstream_server() as (upstream, addr), dns_filter(addr) as dns:
            ask: Ask = ask_udp if transport == "udp" else ask_tcp
            where = dns.udp if transport == "udp" else dns.tcp

            resp = parse_response(await ask(where, build_query("Allowed.TEST", id=42)))
            assert (resp.id, resp.rcode) == (42, Rcode.NOERROR)
            assert sorted(resp.addresses) == RECORDS["allowed.test"]

            resp = parse_response(await ask(where, build_query("other.test", id=43)))
            assert (resp.id, resp.rcode, resp.addresses) == (43, Rcode.NXDOMAIN, [])
            assert dns.denied == [("other.test", "not in the allowlist")]
            assert "other.test" not in upstream.asked  # denied names never leave

            resp = parse_response(await ask(where, build_query("allowed.test", "AAAA")))
            assert (resp.rcode, resp.addresses) == (Rcode.NOERROR, [])
            resp = parse_response(await ask(where, build_query("allowed.test", "TXT")))
            assert (resp.rcode, resp.addresses) == (Rcode.NOERROR, [])

            resp = parse_response(await ask(where, build_query("nx.test")))
            assert resp.rcode == Rcode.NXDOMAIN
            resp = parse_response(await ask(where, build_query("fail.test")))
            assert resp.rcode == Rcode.SERVFAIL

    run(body)


def test_answers_carry_only_the_asked_name() -> None:
    async def body() -> None:
        async with upstream_server() as (_, addr), dns_filter(addr) as dns:
            raw = await ask_udp(dns.udp, build_query("sneaky.test"))
            assert parse_response(raw).addresses == ["192.0.2.30"]
            assert bytes([6, 6, 6, 6]) not in raw and b"evil" not in raw

    run(body)


def test_truncated_upstream_answer_is_fetched_over_tcp() -> None:
    async def body() -> None:
        async with upstream_server() as (upstream, addr), dns_filter(addr) as dns:
            resp = parse_response(await ask_tcp(dns.tcp, build_query("many.test")))
            assert resp.addresses == MANY
            assert "tcp:many.test" in upstream.asked
            raw = await ask_udp(dns.udp, build_query("many.test"))
            assert len(raw) <= 512 and not parse_response(raw).truncated
            assert 0 < len(parse_response(raw).addresses) < len(MANY)

    run(body)


def test_garbage_never_crashes_the_filter() -> None:
    async def body() -> None:
        async with upstream_server() as (_, addr), dns_filter(addr) as dns:
            loop = asyncio.get_running_loop()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                for junk in (b"", b"\x00", os.urandom(11), os.urandom(300), b"\xff" * 40):
                    await loop.sock_sendto(sock, junk, dns.udp)
            bad = HEADER.pack(5, 0, 1, 0, 0, 0) + b"\xc0\x0c\0\1\0\1"  # pointer loop
            resp = await ask_udp(dns.udp, bad)
            _, flags, qd, *_ = HEADER.unpack_from(resp)
            assert flags & FLAG_QR and flags & 0xF == Rcode.FORMERR and qd == 0

            _, writer = await asyncio.open_connection(*dns.tcp)
            writer.write(b"\x00\x05junk!" + b"\x00")  # a framed junk message, then half a frame
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            assert HEADER.unpack_from(await ask_tcp(dns.tcp, bad))[1] & 0xF == Rcode.FORMERR

            resp2 = parse_response(await ask_udp(dns.udp, build_query("allowed.test")))
            assert resp2.addresses == RECORDS["allowed.test"]

    run(body)


@pytest.mark.parametrize("upstream_kind", ["refused", "silent"])
def test_upstream_down_gives_servfail_in_time(upstream_kind: str) -> None:
    async def body() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:
            hole.bind(("127.0.0.1", 0))
            addr = hole.getsockname()
            if upstream_kind == "refused":
                hole.close()  # nothing listens there: ICMP port unreachable
            async with dns_filter(addr, TIMEOUT) as dns:
                for ask, where in ((ask_udp, dns.udp), (ask_tcp, dns.tcp)):
                    started = time.monotonic()
                    resp = parse_response(await ask(where, build_query("allowed.test")))
                    assert resp.rcode == Rcode.SERVFAIL
                    assert time.monotonic() - started < TIMEOUT + 0.5

    run(body)


def test_resolver_directly() -> None:
    async def body() -> None:
        async with upstream_server() as (_, addr):
            resolver = Resolver(addr, timeout=PATIENT)
            assert await resolver.resolve_a("allowed.test.") == RECORDS["allowed.test"]
            assert await resolver.resolve_a("many.test") == MANY  # via TCP
            with pytest.raises(ResolveError, match="NXDOMAIN for nope.test") as nx:
                await resolver.resolve_a("nope.test")
            assert nx.value.rcode == Rcode.NXDOMAIN
            with pytest.raises(ResolveError) as fail:
                await resolver.resolve_a("fail.test")
            assert fail.value.rcode == Rcode.SERVFAIL
            with pytest.raises(ResolveError, match="in time"):
                await Resolver(addr, timeout=TIMEOUT).resolve_a("silent.test")

            raw = await resolver.forward(build_query("other.test", id=999))
            resp = parse_response(raw)
            assert (resp.id, resp.addresses) == (999, RECORDS["other.test"])

    run(body)


def test_resolver_caches_answers_for_their_ttl_and_shares_one_query() -> None:
    async def body() -> None:
        now = [1000.0]
        async with upstream_server() as (upstream, addr):
            resolver = Resolver(addr, timeout=PATIENT, cache_names=2, clock=lambda: now[0])
            together = await asyncio.gather(*(resolver.resolve_a("allowed.test") for _ in range(5)))
            assert together == [RECORDS["allowed.test"]] * 5
            assert await resolver.resolve_a("Allowed.TEST.") == RECORDS["allowed.test"]
            assert upstream.asked == ["allowed.test"]  # one query for six lookups

            now[0] += 301  # past the TTL (300): asked again
            await resolver.resolve_a("allowed.test")
            assert upstream.asked == ["allowed.test"] * 2

            for _ in range(2):  # TTL 0, NXDOMAIN and SERVFAIL are never kept
                await resolver.resolve_a("fleeting.test")
                with pytest.raises(ResolveError):
                    await resolver.resolve_a("nope.test")
                with pytest.raises(ResolveError):
                    await resolver.resolve_a("fail.test")
            assert upstream.asked.count("fleeting.test") == 2
            assert upstream.asked.count("nope.test") == upstream.asked.count("fail.test") == 2

            await resolver.resolve_a("other.test")
            await resolver.resolve_a("many.test")  # two names kept: allowed.test is dropped
            upstream.asked.clear()
            await resolver.resolve_a("other.test")
            await resolver.resolve_a("allowed.test")
            assert upstream.asked == ["allowed.test"]

    run(body)


def test_a_waiter_that_gives_up_does_not_cancel_the_shared_query() -> None:
    async def body() -> None:
        async with upstream_server() as (upstream, addr):
            resolver = Resolver(addr, timeout=PATIENT)
            impatient = asyncio.ensure_future(resolver.resolve_a("other.test"))
            patient = asyncio.ensure_future(resolver.resolve_a("other.test"))
            await asyncio.sleep(0)
            impatient.cancel()
            assert await patient == RECORDS["other.test"]
            assert impatient.cancelled() and upstream.asked == ["other.test"]

    run(body)
