"""How the host reaches a guest agent: a function that opens a new byte stream to it, the VM's
Unix socket on this host (`unix_dial`) or a host agent's tunnel (fleet/link/vm.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

READ_LIMIT = 1 << 20  # the stream reader's buffer (4 of the client's reads)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Dial = Callable[[], Awaitable[Streams]]  # a new byte stream to the agent (OSError: not yet)


def unix_dial(path: str) -> Dial:
    """The agent's Unix socket on this host (a VM's run dir)."""

    async def dial() -> Streams:
        return await asyncio.open_unix_connection(path, limit=READ_LIMIT)

    return dial
