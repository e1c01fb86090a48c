"""A guest's malformed answers (wrong types, missing fields, numbers JSON allows and Python
cannot use: Infinity, NaN, 1e400) are the agent's ``bad_reply``, whatever reads them: never a
``KeyError``, ``TypeError``, ``OverflowError`` or ``RecursionError`` out of the client (the API
answered those as 500s, and they ended E2B watches)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sanbox.guest import protocol as p
from sanbox.host.agent import AgentClient, RemoteError
from sanbox.host.agent.watch import MAX_LINE, parse_line

from .fake_guest import Guest, connected

pytestmark = pytest.mark.unit

INF = float("inf")
NAN = float("nan")

FILE = {"name": "a", "path": "/a", "type": "file", "size": 1, "mode": 420, "mtime": 1.5}
FILE |= {"uid": 0, "gid": 0}
METRICS = {"cpu_count": 2, "cpu_seconds": {"user": 1.0}, "load": [0.1, 0.2, 0.3]}
METRICS |= {"memory": {"total": 1}, "disk": {"total": 1}, "uptime": 1.0, "time": 2.0}
EXIT = {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}


Answer = dict[str, Any] | bytes  # a MSG, or output (DATA on stdout)


async def answering(guest: Guest, answers: list[Answer]) -> None:
    """Answer each OPEN with `answers`, then CLOSE."""
    while data := await guest.recv():
        for frame in guest.decoder.feed(data):
            if isinstance(frame, p.Open):
                for answer in answers:
                    if isinstance(answer, bytes):
                        await guest.send(p.Data(frame.stream, p.STDOUT, answer))
                    else:
                        await guest.send(p.Msg(frame.stream, answer))
                await guest.send(p.Close(frame.stream))


def refused(answers: list[Answer], use: Callable[[AgentClient], Awaitable[object]]) -> RemoteError:
    async def main() -> RemoteError:
        async with connected() as (client, guest):
            agent = asyncio.get_running_loop().create_task(answering(guest, answers))
            with pytest.raises(RemoteError) as caught:
                await asyncio.wait_for(use(client), 5)
            assert not client.closed  # a bad answer ends its call, not the connection
            await client.close()
            await agent
            return caught.value

    return asyncio.run(main())


def result(**body: Any) -> list[Answer]:
    return [{"type": "result", **body}]


@pytest.mark.parametrize(
    ("answers", "use"),
    [
        ([{"type": "started", "pid": 7}, {**EXIT, "exit_code": INF}], lambda c: c.exec(["true"])),
        ([{"type": "started", "pid": 7}, {**EXIT, "exit_code": 1e400}], lambda c: c.exec(["x"])),
        ([{"type": "started", "pid": 7}, {**EXIT, "signal": "9"}], lambda c: c.exec(["true"])),
        ([{"type": "started", "pid": 7}, {"type": "exit"}], lambda c: c.exec(["true"])),
        ([{"type": "started", "pid": NAN}], lambda c: c.exec(["true"])),
        ([{"type": "started", "pid": 10**30}], lambda c: c.exec(["true"])),
        (result(uptime=INF, boot_id="b", agent_version="v"), lambda c: c.ping()),
        (result(uptime=1.0, boot_id=None, agent_version="v"), lambda c: c.ping()),
        (result(**{**METRICS, "load": [NAN, 0.0, 0.0]}), lambda c: c.metrics()),
        (result(**{**METRICS, "load": [1.0]}), lambda c: c.metrics()),
        (result(**{**METRICS, "memory": [1]}), lambda c: c.metrics()),
        (result(**{**METRICS, "cpu_count": "2"}), lambda c: c.metrics()),
        (result(info={**FILE, "size": INF}), lambda c: c.files.stat("/a")),
        (result(info={**FILE, "mtime": "now"}), lambda c: c.files.stat("/a")),
        (result(info="a file"), lambda c: c.files.stat("/a")),
        (result(info={**FILE, "st_mode": "0100644"}), lambda c: c.files.stat("/a")),
        (result(info={**FILE, "owner": 0}), lambda c: c.files.stat("/a")),
        (result(info={**FILE, "group": "g" * 257}), lambda c: c.files.stat("/a")),
        (result(entries=[{**FILE, "owner": ""}]), lambda c: c.files.list("/")),
        (result(info={**FILE, "target": "etc/passwd"}), lambda c: c.files.stat("/a", False)),
        (result(info={**FILE, "target": "/" * 4097}), lambda c: c.files.stat("/a", False)),
        (result(info={**FILE, "target_type": "fifo"}), lambda c: c.files.stat("/a", False)),
        (result(info={**FILE, "target_mode": "0644"}), lambda c: c.files.stat("/a", False)),
        (result(entries=[FILE, 5]), lambda c: c.files.list("/")),
        (result(entries={"a": FILE}), lambda c: c.files.list("/")),
        (result(public_key=5), lambda c: c.ssh.host_key()),
        (result(), lambda c: c.ssh.authorize("ssh-ed25519 AAAA")),
    ],
)
def test_a_malformed_answer_is_a_bad_reply(
    answers: list[Answer], use: Callable[[AgentClient], Awaitable[object]]
) -> None:
    assert refused(answers, use).code == "bad_reply"


def test_an_exit_status_of_infinity_on_the_wire_is_a_bad_reply() -> None:
    """``Infinity`` as the guest writes it (json.dumps allows it, json.loads reads it)."""
    body = b'{"type":"exit","exit_code":Infinity,"signal":null,"timed_out":false}'
    wire = p.HEADER.pack(p.MAGIC, p.FrameType.MSG, 0, 1, len(body)) + body
    assert p.Decoder(synced=True).feed(wire)[0] == p.Msg(1, {**EXIT, "exit_code": INF})

    async def wait(client: AgentClient) -> object:
        proc = await client.exec_stream(["true"], stdin=False)
        return await proc.wait()

    error = refused([{"type": "started", "pid": 7}, {**EXIT, "exit_code": INF}], wait)
    assert error.code == "bad_reply"


def test_well_formed_answers_still_read() -> None:
    async def main() -> None:
        async with connected() as (client, guest):
            answers = result(**{**METRICS, "uptime": 3}, boot_id="b", agent_version="v", info=FILE)
            agent = asyncio.get_running_loop().create_task(answering(guest, answers))
            metrics = await client.metrics()
            assert (metrics.load, metrics.memory, metrics.uptime) == (
                (0.1, 0.2, 0.3),
                {"total": 1},
                3.0,
            )
            assert (await client.ping()).uptime == 3.0
            assert (await client.files.stat("/a")).mtime == 1.5
            await client.close()
            await agent

    asyncio.run(main())


@pytest.mark.parametrize("nesting", [b"[" * 2000, b"[" * 2000 + b"]" * 2000, b'{"a":' * 1500])
def test_a_watch_line_nested_too_deep_is_a_bad_reply(nesting: bytes) -> None:
    with pytest.raises(RemoteError) as caught:
        parse_line(nesting)
    assert caught.value.code == "bad_reply"


def test_a_complete_watch_line_over_the_limit_is_refused() -> None:
    padded = b'{"name": "a", "type": "create"' + b" " * MAX_LINE + b"}"
    with pytest.raises(RemoteError, match="over"):
        parse_line(padded)

    async def watch(client: AgentClient) -> object:
        return await (await client.watches.open("/w")).next()

    assert refused([{"type": "watching"}, padded + b"\n"], watch).code == "bad_reply"
