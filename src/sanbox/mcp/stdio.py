"""`sanbox mcp`: the tools over stdio, for an MCP client that runs Sanbox as a local process.

One `AsyncSanbox` (the server and key the CLI uses: arguments, `SANBOX_URL`/`SANBOX_API_KEY`,
then the config file) serves every call. Standard output carries the protocol, so nothing else
may write there: logs go to standard error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context

from ..sdk import AsyncSanbox
from .tools import Clients, build_server


def shared(sanbox: AsyncSanbox) -> Clients:
    """Every call acts through `sanbox`, which outlives the calls."""

    @asynccontextmanager
    async def clients(_ctx: Context[Any, Any]) -> AsyncIterator[AsyncSanbox]:
        yield sanbox

    return clients


async def serve(client: Callable[[], AsyncSanbox]) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    async with client() as sanbox:
        await build_server(shared(sanbox)).run_stdio_async()
