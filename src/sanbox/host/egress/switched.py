"""The secret proxy's relay after a 101 (a WebSocket, or any protocol the request switched to):
what each side sent past its head goes on, then raw bytes both ways until either side ends (TLS
has no half-close here). What comes down goes through the connection's `LeakScanner`, and a value
in it cuts the connection."""

from __future__ import annotations

import asyncio

from .leak_scan import LeakScanner
from .relay import Idle
from .tls_server import CHUNK, TlsServerStream


async def relay_switched(
    guest: TlsServerStream,
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    trailing: tuple[bytes, bytes],
    idle: Idle,
    scanner: LeakScanner,
) -> bool:
    """Relay until either side ends; `trailing`: what the guest and the upstream sent past their
    heads (to go up, to go down). True if a secret's value came down (the relay was cut)."""
    up_reader, up_writer = upstream
    to_upstream, to_guest = trailing
    leaked = False

    def down(data: bytes) -> None:
        nonlocal leaked
        released = scanner.feed(data) if data else scanner.finish()
        if released is None:
            leaked = True
            raise ConnectionAbortedError("a secret's value")
        if released:
            guest.write(released)

    if to_upstream:
        up_writer.write(to_upstream)
    if to_guest:
        try:
            down(to_guest)
        except ConnectionAbortedError:  # it came with the 101: cut, as below
            return True

    async def to_up() -> None:
        while data := await guest.read(CHUNK):
            idle.touch()
            up_writer.write(data)
            await up_writer.drain()

    async def to_down() -> None:
        while data := await up_reader.read(CHUNK):
            idle.touch()
            down(data)
            await guest.drain()
        down(b"")

    tasks = [asyncio.ensure_future(to_up()), asyncio.ensure_future(to_down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # a broken side just ends the relay
    return leaked
