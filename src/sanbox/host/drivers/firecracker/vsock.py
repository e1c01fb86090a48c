"""The agent channel: Firecracker's vsock, seen from the host as a Unix socket. The host connects
to it, writes `CONNECT <port>\\n` and reads `OK <host port>\\n`; from then on the connection is a
byte stream to whatever listens on that vsock port in the guest (the agent: `--vsock <port>`).
When nothing listens there, Firecracker closes the connection instead of answering.

The handshake is pure (`connect_line`, `parse_ack`); `open_channel` dials it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from .errors import VsockHandshakeError

MAX_ACK = 64  # "OK 4294967295\n" and some
_ACK = re.compile(rb"OK ([0-9]{1,10})\n")
MAX_PORT = 2**32 - 1


def connect_line(port: int) -> bytes:
    """The host's request for a connection to the guest's vsock `port`. Pure."""
    if not 0 <= port <= MAX_PORT:
        raise ValueError(f"a vsock port is a 32-bit number, not {port}")
    return f"CONNECT {port}\n".encode()


def parse_ack(line: bytes) -> int:
    """The host-side port of an `OK <port>\\n` answer; VsockHandshakeError for anything else
    (an empty line: nothing listens on that port in the guest). Pure."""
    match = _ACK.fullmatch(line)
    if match is None or int(match[1]) > MAX_PORT:
        if not line:
            raise VsockHandshakeError("the vsock connection was closed: nothing listens there")
        raise VsockHandshakeError(f"the vsock answered {line[:MAX_ACK]!r}, not 'OK <port>'")
    return int(match[1])


async def open_channel(
    uds: Path, port: int, timeout: float = 5.0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to the guest's vsock `port` through Firecracker's Unix socket `uds`."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(uds)), timeout)
    except (OSError, TimeoutError) as exc:
        raise VsockHandshakeError(f"the vsock socket {uds} cannot be reached: {exc}") from exc
    try:
        writer.write(connect_line(port))
        await writer.drain()
        line = await asyncio.wait_for(_read_line(reader), timeout)
        parse_ack(line)
    except BaseException as exc:
        writer.close()
        if isinstance(exc, (OSError, TimeoutError)):
            raise VsockHandshakeError(f"vsock port {port} via {uds}: {exc!r}") from exc
        raise
    return reader, writer


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """Up to and with the first newline, at most MAX_ACK bytes; what came if the stream ended."""
    line = bytearray()
    while len(line) < MAX_ACK:
        byte = await reader.read(1)
        if not byte:
            break
        line += byte
        if byte == b"\n":
            break
    return bytes(line)
