"""A slept guest's clock is set in the agent handshake: the host's HELLO carries its time, an
agent that sets its clock from it says `clock_set`, and only an agent that did not (one from
before, or a clock it could not set) is asked again with `set_clock`."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from sanbox.guest import control, ssh
from sanbox.guest import protocol as p
from sanbox.guest.session import Session
from sanbox.host.agent import handshake as handshake_module
from sanbox.host.agent.handshake import handshake

from .fake_guest import connected

pytestmark = pytest.mark.unit


class _Libc:
    def __init__(self, result: int = 0) -> None:
        self.result = result
        self.times: list[float] = []

    def clock_settime(self, clock: int, ts: Any) -> int:
        self.times.append(ts._obj.tv_sec + ts._obj.tv_nsec / 1e9)
        return self.result


class _Link:
    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        pass


def _acks(link: _Link) -> list[dict[str, Any]]:
    return [f.body for f in p.Decoder(lenient=True).feed(link.written) if isinstance(f, p.HelloAck)]


def _greet(body: dict[str, Any]) -> list[dict[str, Any]]:
    session, link = Session(), _Link()
    session.attach(link)
    session.feed(p.SYNC + p.encode(p.Hello(body)))
    return _acks(link)


@pytest.fixture
def in_a_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ssh.ROOT_ENV, raising=False)


def test_a_hello_with_the_hosts_time_sets_the_guests_clock(
    in_a_vm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    libc = _Libc()
    monkeypatch.setattr(control, "libc", lambda: libc)
    [ack] = _greet({"nonce": "n1", "protocol": p.PROTOCOL_VERSION, "time": 1_700_000_000.25})
    assert ack["nonce"] == "n1" and ack["clock_set"] is True
    assert libc.times == [pytest.approx(1_700_000_000.25)]


def test_a_hello_without_a_time_leaves_the_clock_alone(
    in_a_vm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    libc = _Libc()
    monkeypatch.setattr(control, "libc", lambda: libc)
    for when in (None, True, "soon"):
        body = {"nonce": "n", "protocol": p.PROTOCOL_VERSION}
        if when is not None:
            body["time"] = when
        [ack] = _greet(body)
        assert "clock_set" not in ack
    assert libc.times == []


def test_a_clock_the_guest_cannot_set_is_said_and_the_handshake_answered(
    in_a_vm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "libc", lambda: _Libc(result=-1))
    [ack] = _greet({"nonce": "n2", "protocol": p.PROTOCOL_VERSION, "time": 5.0})
    assert ack["nonce"] == "n2" and ack["clock_set"] is False


async def _hellos() -> None:
    for clock in (False, True):
        host, guest = socket.socketpair()
        guest.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=host)
        loop = asyncio.get_running_loop()
        before = time.time()
        shaking = asyncio.ensure_future(handshake(reader, writer, loop.time() + 5, clock=clock))
        [hello] = p.Decoder(lenient=True).feed(await loop.sock_recv(guest, 65536))
        assert isinstance(hello, p.Hello)
        if clock:
            assert before <= hello.body["time"] <= time.time()
        else:
            assert "time" not in hello.body
        ack = p.HelloAck({"nonce": hello.body["nonce"], "clock_set": clock})
        await loop.sock_sendall(guest, p.SYNC + p.encode(ack))
        _, body = await shaking
        assert body["clock_set"] is clock
        writer.close()
        guest.close()


async def _opened(guest: Any, timeout: float) -> list[dict[str, Any]]:
    """The control ops the host opened within `timeout` s."""
    ops: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(timeout):
            while True:
                for frame in guest.decoder.feed(await guest.recv()):
                    if isinstance(frame, p.Open):
                        ops.append(frame.params)
                        await guest.send(
                            p.Msg(frame.stream, {"type": "result"}), p.Close(frame.stream)
                        )
    except TimeoutError:
        pass
    return ops


async def _catch_ups() -> None:
    async with connected() as (client, guest):
        assert "clock_set" not in client.hello  # the test's guest is one from before
        ops, _ = await asyncio.gather(_opened(guest, 0.5), client.catch_up_clock())
        assert [op["op"] for op in ops] == ["set_clock"]
    async with connected() as (client, guest):
        client.hello["clock_set"] = True
        ops, _ = await asyncio.gather(_opened(guest, 0.3), client.catch_up_clock())
        assert ops == []


def test_the_hosts_hello_carries_its_time_only_when_asked() -> None:
    asyncio.run(_hellos())


def test_the_clock_is_asked_for_again_only_when_the_handshake_did_not_set_it() -> None:
    asyncio.run(_catch_ups())


async def _late_answer() -> None:
    host, guest = socket.socketpair()
    guest.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=host)
    loop = asyncio.get_running_loop()
    shaking = asyncio.ensure_future(handshake(reader, writer, loop.time() + 5, clock=True))
    [hello] = p.Decoder(lenient=True).feed(await loop.sock_recv(guest, 65536))
    assert isinstance(hello, p.Hello)
    await asyncio.sleep(handshake_module.CLOCK_FRESH + 0.05)  # the agent answers late
    ack = p.HelloAck({"nonce": hello.body["nonce"], "clock_set": True})
    await loop.sock_sendall(guest, p.SYNC + p.encode(ack))
    _, body = await shaking
    assert body["clock_set"] is False  # set from a time that stale: the caller sets it again
    writer.close()
    guest.close()


def test_a_clock_set_from_a_hello_answered_late_is_set_again() -> None:
    asyncio.run(_late_answer())
