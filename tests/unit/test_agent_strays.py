"""Frames the guest sends for streams the client has no channel for: those racing the host's
CLOSE are dropped, as many as the guest could still send on the stream; frames for a stream that
was never open, or past that allowance, drop the connection (a guest streaming them kept the
server's event loop decoding for nothing)."""

from __future__ import annotations

import asyncio

import pytest

from sanbox.guest import protocol as p
from sanbox.host.agent import AgentClient, ProtocolError
from sanbox.host.agent.inbox import MAX_CONTROL_FRAMES
from sanbox.host.agent.strays import Strays

from .fake_guest import Guest, connected, until

pytestmark = pytest.mark.unit

EXIT = {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}


# -- the accounting, sans-IO ----------------------------------------------------------------------


def test_a_frame_for_a_stream_never_closed_here_is_a_violation() -> None:
    for frame in (p.Close(999_999), p.Window(3, 0), p.Data(3, p.STDOUT, b"x"), p.Msg(0, {})):
        with pytest.raises(ProtocolError, match="not open"):
            Strays().arrived(frame)


def test_a_closed_stream_gets_the_data_its_window_allows_and_no_more() -> None:
    strays = Strays()
    strays.closed(5, window_left=100)
    strays.arrived(p.Data(5, p.STDOUT, b"x" * 60))
    strays.arrived(p.Data(5, p.STDERR, b"x" * 40))
    with pytest.raises(ProtocolError, match="after it was closed"):
        strays.arrived(p.Data(5, p.STDOUT, b""))  # an empty one costs a byte


def test_a_closed_stream_gets_a_few_other_frames_then_its_close_ends_it() -> None:
    strays = Strays()
    strays.closed(5, window_left=0)
    for _ in range(MAX_CONTROL_FRAMES):
        strays.arrived(p.Window(5, 0))
    with pytest.raises(ProtocolError, match="after it was closed"):
        strays.arrived(p.Msg(5, EXIT))
    strays.closed(6, window_left=0)
    strays.arrived(p.Close(6))
    with pytest.raises(ProtocolError, match="not open"):
        strays.arrived(p.Close(6))  # the guest's CLOSE was its last word


def test_only_the_last_streams_closed_are_remembered() -> None:
    strays = Strays(remembered=2)
    for stream in (1, 2, 3):
        strays.closed(stream, window_left=10)
    strays.arrived(p.Data(3, p.STDOUT, b"x"))
    strays.arrived(p.Data(2, p.STDOUT, b"x"))
    with pytest.raises(ProtocolError, match="not open"):
        strays.arrived(p.Data(1, p.STDOUT, b"x"))


# -- a client against a guest played by the test --------------------------------------------------


async def pinged(client: AgentClient, guest: Guest) -> None:
    """A ping the guest answers, after whatever came before it (late frames of other streams)."""
    ping = asyncio.get_running_loop().create_task(client.ping())
    while True:
        for frame in guest.decoder.feed(await guest.recv()):
            if isinstance(frame, p.Open) and frame.params.get("op") == "ping":
                body = {"type": "result", "uptime": 1.0, "boot_id": "b", "agent_version": "v"}
                await guest.send(p.Msg(frame.stream, body), p.Close(frame.stream))
                await ping
                return


def test_a_guest_sending_frames_for_streams_never_opened_is_disconnected() -> None:
    async def main() -> None:
        async with connected() as (client, guest):
            await pinged(client, guest)
            await guest.send(*[p.Close(999_999)] * 5000)  # 60 kB: the socket's buffer takes it
            await until(lambda: client.closed, timeout=2)
            with pytest.raises(ProtocolError, match="999999, which is not open"):
                await client.ping()

    asyncio.run(main())


@pytest.mark.parametrize("beyond", [0, 1])
def test_frames_racing_the_close_of_a_stream_are_dropped_within_its_window(beyond: int) -> None:
    """The host closes a stream while the guest sends it a window's worth of output and its exit:
    the connection stays; one byte more than the window and it is dropped."""

    async def main() -> None:
        async with connected() as (client, guest):
            channel = await client.open("exec", {"argv": ["yes"]})
            await channel.close()
            output = [p.Data(channel.id, p.STDOUT, b"y" * p.CHUNK)] * (p.INITIAL_WINDOW // p.CHUNK)
            output += [p.Data(channel.id, p.STDOUT, b"y")] * beyond
            await guest.send(*output, p.Msg(channel.id, EXIT), p.Close(channel.id))
            if beyond:
                await until(lambda: client.closed, timeout=2)
                with pytest.raises(ProtocolError, match="after it was closed"):
                    await client.ping()
            else:
                await pinged(client, guest)
                assert not client.closed

    asyncio.run(main())
