"""A guest that stops reading (its agent stopped or replaced) against the host's writes: no call
waits past its timeout behind a full buffer, ``close()`` ends, a write that nothing drains fails
the connection, and a guest that reads slowly but steadily is waited for."""

from __future__ import annotations

import asyncio

import pytest

from sanbox.guest import protocol as p
from sanbox.host.agent import AgentError, AgentTimeoutError
from sanbox.host.agent import client as client_module
from sanbox.host.agent import files as files_module

from .fake_guest import Guest, connected, until

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def test_calls_and_close_end_in_time_when_the_guest_stops_reading() -> None:
    async def main() -> None:
        async with connected() as (client, guest):
            put = asyncio.get_running_loop().create_task(
                client.files.put("/tmp/big", b"x" * (4 * MIB))
            )
            await until(lambda: guest.unread > 64 * 1024)  # the put waits for its drain
            with pytest.raises(AgentTimeoutError):
                await asyncio.wait_for(client.ping(timeout=0.5), 2)
            with pytest.raises(AgentTimeoutError):
                await asyncio.wait_for(client.call("control", {"op": "fs_thaw"}, timeout=0.5), 2)
            await asyncio.wait_for(client.close(), 2)
            assert client.closed
            with pytest.raises(AgentError):
                await asyncio.wait_for(put, 2)

    asyncio.run(main())


def test_a_write_that_nothing_drains_fails_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "WRITE_STALL", 0.2)

    async def main() -> None:
        async with connected() as (client, _guest):
            with pytest.raises(AgentTimeoutError, match="took nothing"):
                await asyncio.wait_for(client.files.put("/tmp/big", b"x" * (4 * MIB)), 2)
            assert client.closed
            with pytest.raises(AgentTimeoutError):
                await client.ping()  # the connection's error, at once

    asyncio.run(main())


def test_a_guest_that_reads_slowly_but_steadily_is_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each drain takes longer than the stall bound, with bytes taken all along."""
    monkeypatch.setattr(client_module, "WRITE_STALL", 0.2)
    size = 256 * 1024

    async def slow_guest(guest: Guest) -> None:
        got = 0
        while True:
            data = await guest.recv(8 * 1024)
            for frame in guest.decoder.feed(data):
                if isinstance(frame, p.Data):
                    got += len(frame.data)
                if isinstance(frame, p.Eof):
                    result = p.Msg(frame.stream, {"type": "result", "size": got})
                    await guest.send(result, p.Close(frame.stream))
                    return
            await asyncio.sleep(0.025)  # reads 8 KiB at a time, 40 times a second

    async def main() -> None:
        async with connected(host_sndbuf=4096) as (client, guest):
            reader = asyncio.get_running_loop().create_task(slow_guest(guest))
            assert await client.files.put("/tmp/slow", b"y" * size) == size
            await reader

    asyncio.run(main())


def test_a_put_the_guest_grants_no_credit_for_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guest takes every byte and never answers with WINDOW: the put's wait for credit is
    bounded too (the stream ends, not the connection)."""
    monkeypatch.setattr(files_module, "PUT_STALL", 0.2)

    async def swallow(guest: Guest) -> None:
        while await guest.recv():
            pass

    async def main() -> None:
        async with connected() as (client, guest):
            reader = asyncio.get_running_loop().create_task(swallow(guest))
            with pytest.raises(AgentTimeoutError, match="credit"):
                await asyncio.wait_for(client.files.put("/tmp/big", b"x" * (2 * MIB)), 2)
            assert not client.closed
            await client.close()
            await reader

    asyncio.run(main())
