"""The guest agent on a character-device port, as it serves a virtio-serial port in a VM (here
a pty in raw mode, bridged to a Unix socket the host's agent client dials): the port is read in
the event loop's own callback and written straight through when nothing is queued, and output
larger than the port's buffer queues and is flushed whole, in order."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tty
from pathlib import Path

import pytest

from sanbox.guest import link
from sanbox.guest.session import Session
from sanbox.host.agent import AgentClient

pytestmark = pytest.mark.component


async def bridge(master: int, sock_path: Path) -> asyncio.base_events.Server:
    """A Unix socket whose one client speaks to the pty's master side (the host end)."""
    loop = asyncio.get_running_loop()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def from_port() -> None:
            with contextlib.suppress(BlockingIOError):
                writer.write(os.read(master, 65536))

        loop.add_reader(master, from_port)
        try:
            while data := await reader.read(65536):
                view = memoryview(data)
                while view:
                    try:
                        view = view[os.write(master, view) :]
                    except BlockingIOError:
                        await asyncio.sleep(0.001)
        finally:
            loop.remove_reader(master)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_unix_server(client, path=str(sock_path))


def test_the_agent_serves_a_port_pings_and_long_output(short_tmp: Path) -> None:
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    port = os.ttyname(slave)

    async def scenario() -> tuple[list[float], bytes, int]:
        agent = asyncio.ensure_future(link.serve_port(Session(), "test", port))
        server = await bridge(master, short_tmp / "agent.sock")
        try:
            async with AgentClient.connect(str(short_tmp / "agent.sock"), timeout=30) as client:
                rtts = [(await client.ping()).rtt for _ in range(20)]
                big = "import sys; sys.stdout.write('ab' * 300_000); sys.stdout.flush()"
                result = await client.exec(["python3", "-c", big], timeout=60)
                return rtts, result.stdout, result.exit_code
        finally:
            server.close()
            await server.wait_closed()
            agent.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await agent

    try:
        rtts, stdout, code = asyncio.run(scenario())
    finally:
        os.close(slave)
        os.close(master)
    assert len(rtts) == 20
    assert code == 0
    assert stdout == b"ab" * 300_000  # more than a pty holds: queued, flushed whole, in order
