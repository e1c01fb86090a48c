"""`commands.stream_input` and `pty.stream_input` (envd's client-streaming `StreamInput`) through
E2B's SDKs: input in order, each chunk delivered as it is sent (not when the stream ends: the
async SDK's handle shows it, its stream open until `close()`), and a missing process refused as
envd refuses it."""

from __future__ import annotations

import asyncio
import time

import pytest
from e2b import AsyncSandbox, PtySize, Sandbox
from e2b.exceptions import NotFoundException

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


def test_stream_input_to_a_command_in_order(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    chunks = [f"line {i}\n" for i in range(200)]
    sandbox.commands.stream_input(handle.pid, [*chunks[:100], *(c.encode() for c in chunks[100:])])
    sandbox.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "".join(chunks)


def test_stream_input_to_a_pty(sandbox: Sandbox) -> None:
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.stream_input(terminal.pid, ["echo stre", b"amed-in; ", "exit 0\n"])
    seen = bytearray()
    terminal.wait(on_pty=seen.extend)
    assert b"streamed-in" in seen


def test_stream_input_to_no_such_process(sandbox: Sandbox) -> None:
    with pytest.raises(NotFoundException):
        sandbox.commands.stream_input(999_999, ["lost\n"])


def test_the_async_input_handle(e2b_server: E2bServer) -> None:
    asyncio.run(_the_async_input_handle(e2b_server))


async def _the_async_input_handle(e2b_server: E2bServer) -> None:
    sbx = await AsyncSandbox.create("base", envs=e2b_server.envs)
    try:
        seen: list[str] = []
        cat = await sbx.commands.run("cat", background=True, stdin=True, on_stdout=seen.append)
        async with sbx.commands.stream_input(cat.pid) as handle:
            await handle.send("one\n")
            t0 = time.monotonic()
            while "one\n" not in "".join(seen):  # delivered while the handle is open
                assert time.monotonic() - t0 < 10, "the input did not arrive"
                await asyncio.sleep(0.05)
            await handle.send(b"two\n")
        await sbx.commands.close_stdin(cat.pid)
        assert (await cat.wait()).stdout == "one\ntwo\n"

        missing = sbx.commands.stream_input(999_999)
        await missing.send("lost\n")
        with pytest.raises(NotFoundException):
            await missing.close()
    finally:
        await sbx.kill()
