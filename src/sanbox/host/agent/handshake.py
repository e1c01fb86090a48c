"""Reaching a guest agent: dial its stream (retrying until it accepts) and handshake (SYNC +
HELLO until it answers HELLO_ACK with the latest nonce). `AgentClient` (client.py) is made of
what `connected` returns; a host agent's shared guest connection (fleet/link/mux.py) handshakes
with `handshake` alone. With `clock`, each HELLO carries the host's time and the agent sets its
clock from it (a guest that slept: its HELLO_ACK says `clock_set`), one round trip fewer to a
cold guest than a `set_clock` of its own. A HELLO answered more than `CLOCK_FRESH` s after it was
sent (queued behind a booting agent) set the clock that far behind: its `clock_set` is taken as
False, and the caller sets the clock with a call of its own."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from sanbox.guest import protocol as p

from .dial import Dial
from .errors import AgentTimeoutError, AgentUnavailableError

HANDSHAKE_RETRY = 0.5  # seconds between HELLOs while the agent boots (they queue, cheaply)
# a HELLO answered later than this set the guest's clock that far behind: not counted as set
CLOCK_FRESH = 0.25
READ_SIZE = 256 * 1024


class _HandshakeLostError(Exception):
    """The socket closed during the handshake (agent restarting, or replaced)."""


async def handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    deadline: float,
    *,
    clock: bool = False,
) -> tuple[p.Decoder, dict[str, Any]]:
    """Send SYNC + HELLO until the agent answers HELLO_ACK with our latest nonce."""
    loop = asyncio.get_running_loop()
    decoder = p.Decoder(lenient=True)
    while loop.time() < deadline:
        nonce = secrets.token_hex(8)
        decoder.reset()
        hello: dict[str, Any] = {"nonce": nonce, "protocol": p.PROTOCOL_VERSION}
        if clock:
            hello["time"] = time.time()  # each HELLO's own: the answered one's is the latest
        writer.write(p.SYNC + p.encode(p.Hello(hello)))
        sent = loop.time()
        attempt_end = min(deadline, loop.time() + HANDSHAKE_RETRY)
        while (remaining := attempt_end - loop.time()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    data = await reader.read(READ_SIZE)
            except TimeoutError:
                break
            except ConnectionError as exc:
                raise _HandshakeLostError(str(exc)) from exc
            if not data:
                raise _HandshakeLostError("connection closed")
            frames = decoder.feed(data)
            decoder.errors.clear()  # lenient until the answer: garbage is skipped, not kept
            for frame in frames:
                if isinstance(frame, p.HelloAck) and frame.body.get("nonce") == nonce:
                    decoder.lenient = False
                    decoder.errors.clear()
                    if frame.body.get("clock_set") and loop.time() - sent > CLOCK_FRESH:
                        frame.body["clock_set"] = False  # set from a stale time: set it again
                    return decoder, frame.body
    raise TimeoutError


async def connected(
    dial: Dial, where: str, timeout: float, *, clock: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, p.Decoder, dict[str, Any]]:
    """A handshaken stream to the agent `dial` reaches (`where` names it in errors), dialled
    again while it refuses or closes during the handshake, until `timeout`: its reader, writer,
    decoder and the agent's HELLO_ACK."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: BaseException | None = None
    reached = False
    while (remaining := deadline - loop.time()) > 0:
        try:
            async with asyncio.timeout(remaining):
                reader, writer = await dial()
        except TimeoutError:
            break
        except OSError as exc:
            last = exc
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
            continue
        reached = True
        try:
            decoder, hello = await handshake(reader, writer, deadline, clock=clock)
        except _HandshakeLostError as exc:
            last = exc
            writer.close()
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
            continue
        except TimeoutError:  # reached, never answered (a guest still booting): said below
            writer.close()
            break
        except BaseException:
            writer.close()
            raise
        return reader, writer, decoder, hello
    if reached:
        raise AgentTimeoutError(
            f"agent at {where} did not complete the handshake in {timeout} s", where=where
        )
    raise AgentUnavailableError(f"cannot connect to agent at {where}: {last}", where=where)
