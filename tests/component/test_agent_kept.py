"""Kept processes (guest/keeper.py) with the real guest agent as a local process, driven by the
real host client: they outlive the connection that started them, their output while no one is
attached is held (and its loss past the bound said), their exit status waits to be read, and the
bounds are refused clearly. A plain exec still ends with its connection."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncGenerator, Iterator

import pytest

from sanbox.guest.keeper import MAX_KEPT
from sanbox.guest.output_log import LIMIT
from sanbox.host.agent import AgentClient, ExecProcess, Exit, RemoteError, Stderr, Stdout

from .test_agent import AgentProcess
from .test_agent import agent as agent  # the fixture: the real agent on a Unix socket

pytestmark = pytest.mark.component


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Kept processes a test started: their groups are killed at the end (they outlive the
    agent too, as they would a host connection)."""
    started: list[int] = []
    yield started
    for pid in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


async def until(what: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await what():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout}s"
        await asyncio.sleep(0.05)


async def collect(proc: ExecProcess) -> tuple[bytes, bytes, Exit | None]:
    out, err = bytearray(), bytearray()
    async for event in proc.events(timeout=10):
        if isinstance(event, Stdout):
            out += event.data
        elif isinstance(event, Stderr):
            err += event.data
    return bytes(out), bytes(err), proc.exit


async def exited(client: AgentClient, pid: int) -> bool:
    return not next(k for k in await client.kept.list() if k.pid == pid).running


def test_a_kept_process_outlives_its_connection(agent: AgentProcess, pids: list[int]) -> None:
    async def body() -> None:
        first = await agent.connect()
        assert first.kept.supported
        proc = await first.kept.exec(
            "echo one; echo warn >&2; sleep 0.5; echo two; read x; echo got $x; exit 3",
            tag="job",
        )
        pids.append(proc.pid)
        events = proc.events(timeout=5)
        assert await anext(events) == Stdout(b"one\n")
        assert isinstance(events, AsyncGenerator)  # an async generator: it can be closed
        await events.aclose()
        await first.close()
        await asyncio.sleep(0.8)  # "two" comes while no one is attached

        second = await agent.connect()
        [info] = await second.kept.list()
        assert (info.pid, info.kind, info.tag, info.running) == (proc.pid, "exec", "job", True)
        assert info.cmd.startswith("/bin/sh -c echo one")
        attached = await second.kept.attach(proc.pid, {1: len(b"one\n")})
        assert attached.lost == {}
        again = attached.proc
        assert isinstance(again, ExecProcess)
        await again.write_stdin(b"hi\n")
        out, err, end = await collect(again)
        assert (out, err) == (b"two\ngot hi\n", b"warn\n")  # stdout from where it was left
        assert end == Exit(exit_code=3, signal=None, timed_out=False)
        assert await second.kept.forget(proc.pid)
        assert await second.kept.list() == []
        await second.close()

    asyncio.run(body())


def test_output_past_the_bound_is_dropped_oldest_first_and_the_loss_said(
    agent: AgentProcess, pids: list[int]
) -> None:
    total = 3 * LIMIT

    async def body() -> None:
        first = await agent.connect()
        script = f"sleep 0.3; head -c {total} /dev/zero | tr '\\0' x; echo; echo end >&2"
        proc = await first.kept.exec(script)
        pids.append(proc.pid)
        await first.close()
        second = await agent.connect()
        await until(lambda: exited(second, proc.pid))
        attached = await second.kept.attach(proc.pid)
        assert isinstance(attached.proc, ExecProcess)
        out, err, end = await collect(attached.proc)
        assert err == b"end\n" and out.endswith(b"x\n") and set(out[:-1]) == {ord("x")}
        assert attached.lost.get(1, 0) + len(out) == total + 1  # every byte: held or said lost
        assert total + 1 - LIMIT <= attached.lost[1] < total  # about 1 MiB kept, the newest
        assert end is not None and end.exit_code == 0
        await second.close()

    asyncio.run(body())


def test_an_exit_while_detached_is_kept_until_read(agent: AgentProcess, pids: list[int]) -> None:
    async def body() -> None:
        first = await agent.connect()
        proc = await first.kept.exec("sleep 0.2; exit 7")
        pids.append(proc.pid)
        await first.close()
        second = await agent.connect()
        await until(lambda: exited(second, proc.pid))
        [info] = await second.kept.list()
        assert (info.running, info.exit_code, info.signal) == (False, 7, None)
        attached = await second.kept.attach(proc.pid)
        assert isinstance(attached.proc, ExecProcess)
        assert (await collect(attached.proc))[2] == Exit(7, None, False)
        assert [k.pid for k in await second.kept.list()] == [proc.pid]  # until forgotten
        assert await second.kept.forget(proc.pid)
        with pytest.raises(RemoteError) as info_:
            await second.kept.attach(proc.pid)
        assert info_.value.code == "no_such_process"
        await second.close()

    asyncio.run(body())


def test_a_kept_terminal_and_a_second_attach(agent: AgentProcess, pids: list[int]) -> None:
    async def body() -> None:
        first = await agent.connect()
        term = await first.kept.pty(["/bin/sh"], rows=10, cols=40)
        pids.append(term.pid)
        await first.close()
        second = await agent.connect()
        attached = await second.kept.attach(term.pid)
        with pytest.raises(RemoteError) as taken:
            await second.kept.attach(term.pid)
        assert taken.value.code == "already_attached"
        pty = attached.proc
        await pty.resize(30, 100)  # type: ignore[union-attr]
        await pty.write(b"stty size; exit 4\n")  # type: ignore[union-attr]
        seen = bytearray()
        while chunk := await pty.read(10):  # type: ignore[union-attr]
            seen += chunk
        assert b"30 100" in seen and pty.exit is not None and pty.exit.exit_code == 4
        await second.close()

    asyncio.run(body())


def test_kill_and_the_bound_on_kept_processes(agent: AgentProcess, pids: list[int]) -> None:
    async def body() -> None:
        client = await agent.connect()
        procs = []
        for _ in range(MAX_KEPT):
            proc = await client.kept.exec(["sleep", "600"])
            pids.append(proc.pid)
            procs.append(proc)
        with pytest.raises(RemoteError) as full:
            await client.kept.exec(["true"])
        assert full.value.code == "too_many_kept" and str(MAX_KEPT) in full.value.message
        await procs[0].signal(signal.SIGKILL)
        assert (await collect(procs[0]))[2] == Exit(137, 9, False)
        more = await client.kept.exec(["true"])  # the exited one, never forgotten, makes room
        pids.append(more.pid)
        assert procs[0].pid not in [k.pid for k in await client.kept.list()]
        await client.close()

    asyncio.run(body())


def test_a_plain_exec_still_ends_with_its_connection(agent: AgentProcess) -> None:
    async def body() -> None:
        client = await agent.connect()
        proc = await client.exec_stream(["sleep", "600"])
        await client.close()
        again = await agent.connect()  # a new handshake resets the stream table

        async def gone() -> bool:
            try:
                os.kill(proc.pid, 0)
            except ProcessLookupError:
                return True
            return False

        await until(gone)
        assert await again.kept.list() == []
        await again.close()

    asyncio.run(body())
