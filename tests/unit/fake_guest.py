"""A guest agent played by a test, over a socketpair: it answers the host's HELLO, then reads
and writes what the test says; a real ``AgentClient`` is at the other end."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

from sanbox.guest import protocol as p
from sanbox.host.agent import AgentClient
from sanbox.host.agent.dial import Streams


class Guest:
    """The guest's end of a socketpair: it answers the host's HELLO, then does what the test
    says (by default, never reads again)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = p.Decoder()
        self.host: asyncio.StreamWriter | None = None  # the client's end, as dialled

    @property
    def unread(self) -> int:
        """Bytes the host wrote that wait in its transport (the kernel's buffer is full)."""
        assert self.host is not None
        return self.host.transport.get_write_buffer_size()

    async def recv(self, size: int = 65536) -> bytes:
        return await asyncio.get_running_loop().sock_recv(self.sock, size)

    async def send(self, *frames: p.Frame, sync: bool = False) -> None:
        data = (p.SYNC if sync else b"") + b"".join(map(p.encode, frames))
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def handshake(self) -> None:
        while True:
            for frame in self.decoder.feed(await self.recv()):
                if isinstance(frame, p.Hello):
                    ack = p.HelloAck({"nonce": frame.body["nonce"], "protocol": 3})
                    await self.send(ack, sync=True)
                    return


@contextlib.asynccontextmanager
async def connected(host_sndbuf: int | None = None) -> AsyncIterator[tuple[AgentClient, Guest]]:
    """A client handshaken with a `Guest`; the host's socket send buffer `host_sndbuf` if given
    (small: what the guest has not read waits in the client's transport, not the kernel)."""
    host, guest_sock = socket.socketpair()
    if host_sndbuf is not None:
        host.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, host_sndbuf)
    guest_sock.setblocking(False)
    guest = Guest(guest_sock)

    async def dial() -> Streams:
        reader, guest.host = await asyncio.open_connection(sock=host)
        return reader, guest.host

    async def connect() -> AgentClient:
        return await AgentClient.dial(dial, "the test's guest", timeout=5)

    client, _ = await asyncio.gather(connect(), guest.handshake())
    try:
        yield client, guest
    finally:
        await asyncio.wait_for(client.close(), 5)
        guest_sock.close()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)
