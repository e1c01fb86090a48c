"""Upstream bytes are the kernel's own count (TCP_INFO), read live and kept at close: over real
loopback connections."""

from __future__ import annotations

import asyncio

import pytest

from sanbox.host.egress.traffic import Traffic, carried

pytestmark = pytest.mark.unit


def test_bytes_are_counted_while_open_and_kept_after_close() -> None:
    async def scenario() -> None:
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(await r.readexactly(10_000))
            await w.drain()
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        traffic = Traffic()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            traffic.opened(writer)
            writer.write(b"x" * 10_000)
            await writer.drain()
            assert len(await reader.readexactly(10_000)) == 10_000
            live = traffic.total()
            assert live >= 20_000, live  # sent (acknowledged) and received
            traffic.closing(writer)
            writer.close()
            assert traffic.total() == live  # closed: kept as it was
            traffic.closing(writer)  # twice is once
            assert traffic.total() == live
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_socket_that_cannot_say_counts_nothing() -> None:
    class Broken:
        def getsockopt(self, level: int, option: int, length: int) -> bytes:
            raise OSError("not TCP")

    assert carried(Broken()) == 0
