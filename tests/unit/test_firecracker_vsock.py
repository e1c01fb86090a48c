"""The agent channel over Firecracker's vsock: the `CONNECT <port>` / `OK <n>` handshake, pure and
against a real Unix socket server that answers as Firecracker's vsock device does (no mocks: the
connector dials a socket, writes and reads bytes)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sanbox.host.drivers.firecracker.errors import VsockHandshakeError
from sanbox.host.drivers.firecracker.vsock import connect_line, open_channel, parse_ack

pytestmark = pytest.mark.unit

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def test_the_handshake_lines() -> None:
    assert connect_line(1024) == b"CONNECT 1024\n"
    assert parse_ack(b"OK 1073741824\n") == 1073741824
    for port in (-1, 2**32):
        with pytest.raises(ValueError):
            connect_line(port)
    with pytest.raises(VsockHandshakeError, match="nothing listens"):
        parse_ack(b"")
    for bad in (
        b"OK\n",
        b"OK 12",
        b"ok 12\n",
        b"OK 12 \n",
        b"NO 1\n",
        b"OK 99999999999\n",
        b"OK 4294967296\n",
    ):
        with pytest.raises(VsockHandshakeError, match="not 'OK <port>'"):
            parse_ack(bad)


class FakeVsock:
    """A Unix socket server that reads the handshake line and hands over to `handler`; on exit
    it waits for its connections to end (each closes its end)."""

    def __init__(self, path: Path, handler: Handler, handshake: bool = True) -> None:
        self.path = path
        self.handler = handler
        self.handshake = handshake
        self.asked: list[bytes] = []
        self.done: list[asyncio.Event] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        done = asyncio.Event()
        self.done.append(done)
        try:
            if self.handshake:
                self.asked.append(await reader.readline())
            await self.handler(reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()
            done.set()

    async def __aenter__(self) -> FakeVsock:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for done in self.done:
            await asyncio.wait_for(done.wait(), 5.0)
        self.server.close()
        await self.server.wait_closed()


async def served(tmp_path: Path, handler: Handler, port: int = 1024) -> tuple[bytes, bytes]:
    """Dial `handler`'s socket; what the connector read after the handshake, and what the
    server was asked."""
    async with FakeVsock(tmp_path / "v.sock", handler) as fake:
        reader, writer = await open_channel(fake.path, port, timeout=5.0)
        writer.write(b"ping\n")
        await writer.drain()
        got = await asyncio.wait_for(reader.readline(), 5.0)
        writer.close()
        await writer.wait_closed()
    return got, fake.asked[0]


def test_a_stream_to_the_guest_port(tmp_path: Path) -> None:
    async def firecracker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"OK 1073741824\n")  # then the guest's bytes, here an echo
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    got, asked = asyncio.run(served(tmp_path, firecracker))
    assert asked == b"CONNECT 1024\n"
    assert got == b"ping\n"


def test_bytes_right_after_the_ack_are_the_guest_s(tmp_path: Path) -> None:
    async def eager(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"OK 5\nhello\n")  # one write: the guest spoke first
        await writer.drain()
        await reader.read()

    got, _ = asyncio.run(served(tmp_path, eager))
    assert got == b"hello\n"


def test_nothing_listening_in_the_guest(tmp_path: Path) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # Firecracker closes the connection: no listener on that port

    with pytest.raises(VsockHandshakeError, match="nothing listens"):
        asyncio.run(served(tmp_path, refuse))


def test_an_endless_answer_is_cut(tmp_path: Path) -> None:
    async def babble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * 100_000)
        await writer.drain()
        await reader.read()

    with pytest.raises(VsockHandshakeError, match="not 'OK <port>'"):
        asyncio.run(served(tmp_path, babble))


def test_no_socket(tmp_path: Path) -> None:
    with pytest.raises(VsockHandshakeError, match="cannot be reached"):
        asyncio.run(open_channel(tmp_path / "absent.sock", 1024, timeout=1.0))


def test_a_silent_socket_times_out(tmp_path: Path) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def dial() -> None:
        async with FakeVsock(tmp_path / "s.sock", silent, handshake=False) as fake:
            await open_channel(fake.path, 1024, timeout=0.2)

    with pytest.raises(VsockHandshakeError, match="TimeoutError"):
        asyncio.run(dial())
