"""One computer cannot flood the host's resolver nor push out a neighbour's names: its DNS
filter answers REFUSED past its query rate (UDP and TCP alike) without asking upstream, and
each computer's resolver, made `apart` from the host's, keeps a cache of its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

from sanbox.host.egress import DnsFilter, Resolver
from sanbox.host.egress.dnsmsg import Rcode, build_query, parse_response
from sanbox.host.egress.name_cache import CacheRoom
from sanbox.host.egress.query_rate import QueryRate
from sanbox.host.egress.resolver import ResolveError

from .test_dns_filter import PATIENT, RECORDS, Ask, ask_tcp, ask_udp, run, upstream_server

pytestmark = pytest.mark.component


@contextlib.asynccontextmanager
async def serving(dns: DnsFilter) -> AsyncIterator[tuple[tuple[str, int], tuple[str, int]]]:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    where = udp.getsockname(), tcp.getsockname()
    task = asyncio.create_task(dns.serve(udp, tcp))
    try:
        yield where
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_queries_past_the_rate_are_refused_and_never_asked_upstream(transport: str) -> None:
    async def body() -> None:
        now = [1000.0]
        denied: list[tuple[str, str]] = []
        async with upstream_server() as (upstream, addr):
            dns = DnsFilter(
                lambda name: name.endswith(".wild.test"),  # an allowed wildcard
                Resolver(addr, timeout=PATIENT),
                lambda name, reason: denied.append((name, reason)),
                rate=QueryRate(rate=4.0, burst=5),
                clock=lambda: now[0],
            )
            async with serving(dns) as (udp, tcp):
                ask: Ask = ask_udp if transport == "udp" else ask_tcp
                where = udp if transport == "udp" else tcp
                rcodes = []
                for i in range(8):
                    wire = build_query(f"n{i}.wild.test", id=100 + i)
                    resp = parse_response(await ask(where, wire))
                    assert resp.id == 100 + i and resp.name == f"n{i}.wild.test"
                    rcodes.append(resp.rcode)
                assert rcodes == [Rcode.NXDOMAIN] * 5 + [Rcode.REFUSED] * 3
                assert upstream.asked == [f"n{i}.wild.test" for i in range(5)]
                assert denied == [("*", "over the DNS query rate (4 a second)")] * 3

                now[0] += 0.25  # one more token
                resp = parse_response(await ask(where, build_query("late.wild.test")))
                assert resp.rcode == Rcode.NXDOMAIN and upstream.asked[-1] == "late.wild.test"
                resp = parse_response(await ask(where, build_query("later.wild.test")))
                assert resp.rcode == Rcode.REFUSED and "later.wild.test" not in upstream.asked

    run(body)


def test_a_computer_s_lookups_never_push_out_a_neighbour_s_names() -> None:
    async def body() -> None:
        async with upstream_server() as (upstream, addr):
            host = Resolver(addr, timeout=PATIENT, cache_names=2)
            quiet, flood = host.apart(), host.apart()
            assert await quiet.resolve_a("allowed.test") == RECORDS["allowed.test"]
            for name in ("other.test", "many.test", "sneaky.test"):  # more than its 2 names
                await flood.resolve_a(name)
            upstream.asked.clear()
            assert await quiet.resolve_a("allowed.test") == RECORDS["allowed.test"]
            assert upstream.asked == []  # still cached: the flood dropped only its own
            await flood.resolve_a("other.test")
            assert upstream.asked == ["other.test"]

    run(body)


def test_the_host_bound_over_every_computer_s_cache_and_forget() -> None:
    async def body() -> None:
        async with upstream_server() as (upstream, addr):
            room = CacheRoom(total=1)
            host = Resolver(addr, timeout=PATIENT, room=room)
            first, second = host.apart(), host.apart()
            await first.resolve_a("allowed.test")
            await second.resolve_a("other.test")  # the host is full: answered, not kept
            assert room.used == 1
            upstream.asked.clear()
            await second.resolve_a("other.test")
            await first.resolve_a("allowed.test")
            assert upstream.asked == ["other.test"]

            first.forget()  # its computer's egress stopped
            assert room.used == 0
            await second.resolve_a("other.test")
            await second.resolve_a("other.test")
            assert upstream.asked == ["other.test"] * 2

    run(body)


def test_a_computer_s_upstream_questions_are_bounded_its_proxy_s_lookups_too() -> None:
    """Its proxy resolves the names of its HTTP and TLS requests with the same resolver: a guest
    connecting to ever new names under an allowed wildcard, never asking its DNS filter, is held
    to the same rate upstream (the lookup fails as refused, the connection with it)."""

    async def body() -> None:
        now = [500.0]
        async with upstream_server() as (upstream, addr):
            host = Resolver(addr, timeout=PATIENT, clock=lambda: now[0])
            mine = host.apart()
            assert mine.rate is not None and host.rate is None  # the host's own: unbounded
            mine.rate = QueryRate(rate=4.0, burst=3)
            failed = []
            for i in range(5):
                try:
                    await mine.resolve_a(f"n{i}.wild.test")
                except ResolveError as exc:
                    failed.append(exc.rcode)
            assert upstream.asked == [f"n{i}.wild.test" for i in range(3)]
            assert failed == [Rcode.NXDOMAIN] * 3 + [Rcode.REFUSED] * 2
            now[0] += 0.25  # one more question
            assert await mine.resolve_a("allowed.test") == RECORDS["allowed.test"]
            assert await mine.resolve_a("allowed.test") == RECORDS["allowed.test"]  # cached
            assert upstream.asked[-1] == "allowed.test" and len(upstream.asked) == 4

    run(body)
