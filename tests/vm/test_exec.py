import asyncio
import signal
from collections.abc import Callable
from typing import Any

import pytest

from sanbox.host.agent import CommandNotFoundError, ExecResult
from sanbox.host.runtime import Machine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]


def test_echo_and_stdin(machine: Machine, run: Run) -> None:
    result: ExecResult = run(machine.agent.exec(["echo", "hello", "world"]))
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"hello world\n", b"")
    result = run(machine.agent.exec(["sh", "-c", "tr a-z A-Z"], stdin=b"from the host\n"))
    assert result.stdout == b"FROM THE HOST\n"


def test_stdout_and_stderr_apart_and_exit_codes(machine: Machine, run: Run) -> None:
    result = run(machine.agent.exec("echo out; echo err >&2; exit 1"))
    assert (result.stdout, result.stderr, result.exit_code) == (b"out\n", b"err\n", 1)
    assert run(machine.agent.exec(["true"])).exit_code == 0


def test_sigkill_from_the_host_gives_137(machine: Machine, run: Run) -> None:
    async def scenario() -> int:
        proc = await machine.agent.exec_stream(["sleep", "300"])
        await asyncio.sleep(0.3)
        await proc.signal(signal.SIGKILL)
        exit_info = await proc.wait()
        return int(exit_info.exit_code)

    assert run(scenario(), 60) == 137


def test_twenty_concurrent_execs(machine: Machine, run: Run) -> None:
    async def scenario() -> list[ExecResult]:
        return await asyncio.gather(
            *(machine.agent.exec(f"sleep 0.2; echo {i}") for i in range(20))
        )

    results = run(scenario(), 120)
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(20)]
    assert all(r.exit_code == 0 for r in results)


def test_missing_program_is_a_typed_error_with_127(machine: Machine, run: Run) -> None:
    with pytest.raises(CommandNotFoundError) as info:
        run(machine.agent.exec(["no-such-program-here"]))
    assert info.value.exit_code == 127
    assert "no-such-program-here" in str(info.value)
    # through a shell, the shell's own 127
    assert run(machine.agent.exec("no-such-program-here")).exit_code == 127


def test_pty_sees_a_resize(machine: Machine, run: Run) -> None:
    async def scenario() -> bytes:
        pty = await machine.agent.pty(["/bin/sh"], rows=24, cols=80)
        await pty.write(b"stty size\n")
        await asyncio.sleep(0.5)
        await pty.resize(40, 132)
        await pty.write(b"stty size; exit\n")
        out = b""
        while chunk := await pty.read():
            out += chunk
        await pty.wait()
        return out

    out = run(scenario(), 60)
    assert b"24 80" in out and b"40 132" in out
    assert out.index(b"24 80") < out.index(b"40 132")
