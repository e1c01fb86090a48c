"""MCP `read_file` holds the server's memory to its cap whatever the file becomes between the
tool's stat and its read: the tool's calls reach the API in-process (`httpx.ASGITransport`, which
keeps a whole answer in memory), so a guest that swaps a small file for a 1 TB sparse one in
between must not make the server read it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from mcp.types import CallToolResult

from sanbox import Sanbox
from sanbox.guest import protocol as p
from sanbox.host.agent.files import FileInfo, Files
from sanbox.mcp.results import FILE_CAP

from .conftest import LiveServer
from .test_mcp import call, over_http, structured, text

pytestmark = pytest.mark.component

SWAPPED = 2**40  # what the file's stat says once the guest has swapped it
OFFERED = 16 * 2**20  # bytes the swapped file's guest read offers at most (the test's own bound)


def test_read_file_reads_no_more_than_its_cap_of_a_file_that_grows_after_its_stat(
    live_server: LiveServer, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = short_tmp / "swapped.txt"
    path.write_bytes(b"small\n")
    stats = 0
    read = 0
    real_stat, real_get = Files.stat, Files.get

    async def stat(self: Files, remote: str, follow: bool = True) -> FileInfo:
        nonlocal stats
        info = await real_stat(self, remote, follow)
        if remote != str(path):
            return info
        stats += 1
        return info if stats == 1 else dataclasses.replace(info, size=SWAPPED)

    def get(self: Files, remote: str, *, timeout: float = 60.0) -> AsyncGenerator[bytes, None]:
        if remote != str(path):
            return real_get(self, remote, timeout=timeout)

        async def endless() -> AsyncGenerator[bytes, None]:
            nonlocal read
            while read < OFFERED:
                read += p.CHUNK
                yield b"x" * p.CHUNK

        return endless()

    monkeypatch.setattr(Files, "stat", stat)
    monkeypatch.setattr(Files, "get", get)

    async def scenario() -> CallToolResult:
        async with over_http(live_server.url, live_server.key) as session:
            made = await call(session, "create_computer", name="swap")
            assert not made.is_error, text(made)
            refused = await call(session, "read_file", computer="swap", path=str(path))
            await call(session, "delete_computer", computer="swap")
            return refused

    refused = asyncio.run(scenario())
    assert stats >= 2  # the tool's stat saw it small, the read's saw it swapped
    assert read <= FILE_CAP + 1 + p.CHUNK, f"the server read {read} bytes of it"
    assert refused.is_error, text(refused)
    assert structured(refused)["error"]["code"] == "file_too_large"
    assert f"more than {FILE_CAP} bytes" in text(refused)


def test_a_download_with_max_bytes_sends_the_files_first_bytes(
    live_server: LiveServer, short_tmp: Path
) -> None:
    """The bound the tool uses is the API's (`GET .../files?max_bytes=`): `head -c`."""
    path = short_tmp / "ten.txt"
    path.write_bytes(b"0123456789")
    with Sanbox(live_server.url, live_server.key, timeout=60) as client:
        c = client.computers.create(name="heads", idle_timeout=0)
        assert c.files.read(str(path), max_bytes=4) == b"0123"
        assert c.files.read(str(path), max_bytes=11) == b"0123456789"
        assert c.files.read("/proc/self/status", max_bytes=5) == b"Name:"
        c.delete()
