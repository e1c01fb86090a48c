"""`sanbox mcp`: Sanbox's tools for an MCP client (Claude Desktop, Claude Code, Cursor...) over
stdio, acting through the server and key the CLI uses. The `mcp` package is imported by the
command, never with the CLI."""

from __future__ import annotations

import asyncio
import logging
import sys

import typer

from . import config


def mcp() -> None:
    """Serve Sanbox's MCP tools on stdin/stdout (add `sanbox mcp` to your MCP client)."""
    from ..mcp.stdio import serve

    # stdout carries the protocol: logs go to stderr, warnings and worse only
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(serve(config.async_client))


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
