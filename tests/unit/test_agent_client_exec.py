"""`AgentClient.exec` on the wire, against an agent played by the test: a command given no input
has its input closed in the same write as its OPEN (the guest reads both at once and is not woken
again while the command runs); one given input gets it after it started, then the EOF."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from sanbox.guest import protocol as p
from sanbox.host.agent import AgentClient

pytestmark = pytest.mark.unit


async def _exec_reads(stdin: bytes | None) -> list[list[p.Frame]]:
    """The frames an exec of `cat` sends the agent after the handshake, as read (one list per
    read); the agent answers started once it has the OPEN, then the exit once stdin ended."""
    reads: list[list[p.Frame]] = []
    ended = asyncio.Event()

    async def agent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve(reader, writer)
        finally:
            writer.close()
            ended.set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = p.Decoder()
        while data := await reader.read(65536):
            frames = decoder.feed(data)
            if isinstance(frames[0], p.Hello):
                ack = p.HelloAck({"nonce": frames[0].body["nonce"], "protocol": 3})
                writer.write(p.SYNC + p.encode(ack))
                continue
            reads.append(frames)
            for frame in frames:
                if isinstance(frame, p.Open):
                    writer.write(p.encode(p.Msg(frame.stream, {"type": "started", "pid": 7})))
                if isinstance(frame, p.Eof) and frame.channel == p.STDIN:
                    body = {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}
                    exit_ = p.Msg(frame.stream, body)
                    writer.write(p.encode(exit_) + p.encode(p.Close(frame.stream)))

    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        path = str(Path(folder) / "agent.sock")
        server = await asyncio.start_unix_server(agent, path)
        async with server:
            client = await AgentClient.connect(path, timeout=5)
            try:
                result = await client.exec(["cat"], stdin=stdin)
            finally:
                await client.close()
            await ended.wait()
    assert result.exit_code == 0
    return reads


def test_a_command_without_input_has_it_closed_with_its_open() -> None:
    reads = asyncio.run(_exec_reads(None))
    assert [type(f).__name__ for f in reads[0]] == ["Open", "Eof"]
    assert reads[0][1] == p.Eof(reads[0][0].stream, p.STDIN)


@pytest.mark.parametrize("stdin", [b"", b"hello"])
def test_input_goes_after_the_start_and_empty_input_is_none(stdin: bytes) -> None:
    reads = asyncio.run(_exec_reads(stdin))
    frames = [f for read in reads for f in read]
    names = [type(f).__name__ for f in frames]
    assert names == (["Open", "Eof"] if not stdin else ["Open", "Data", "Eof"])
    if stdin:
        assert [type(f).__name__ for f in reads[0]] == ["Open"]
        assert frames[1] == p.Data(frames[0].stream, p.STDIN, stdin)
