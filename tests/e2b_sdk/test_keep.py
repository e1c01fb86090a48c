"""A background command outlives the server's connection to the guest agent (every process the
SDK starts is kept in the guest): its output while no connection was attached reaches the
handle `commands.connect` gives, stdin and kill work, and the exit code is reported.

The connection is taken over the way a second host would: another client handshakes with the
computer's agent, which serves only the newest connection, so the server's drops and the
server dials again on its next call (a pause ends it the same way; tests/vm/test_e2b.py)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest
from e2b import CommandExitException, Sandbox

from sanbox.e2b.identity import computer_id
from sanbox.host.agent import AgentClient

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


@pytest.fixture
def sandbox(e2b_server: E2bServer) -> Iterator[Sandbox]:
    sbx = Sandbox.create("base", envs=e2b_server.envs)
    yield sbx
    sbx.kill()


def take_over(e2b_server: E2bServer, sbx: Sandbox) -> None:
    cid = computer_id(sbx.sandbox_id)
    assert cid is not None
    sock = e2b_server.data_dir.computer(cid).run / "agent.sock"

    async def other_host() -> None:
        async with AgentClient.connect(str(sock)) as client:
            assert client.kept.supported

    asyncio.run(other_host())


def stdout_until(handle: object, text: str) -> str:
    seen = ""
    for out, _err, _pty in handle:  # type: ignore[attr-defined]
        seen += out or ""
        if text in seen:
            return seen
    raise AssertionError(f"{text!r} never came; saw {seen!r}")


def wait_for(path: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.05)


def test_background_commands_survive_a_reconnect(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    mark = f"{e2b_server.scratch}/keep-{sandbox.sandbox_id}"
    wait = f"while [ ! -e {mark}.go ]; do sleep 0.05; done"
    handle = sandbox.commands.run(
        f"echo first; {wait}; echo while-detached; touch {mark}.1; read x; echo got $x; sleep 600",
        background=True,
        stdin=True,
    )
    quick = sandbox.commands.run(f"{wait}; echo bye; touch {mark}.2; exit 5", background=True)
    assert stdout_until(handle, "first") == "first\n"
    handle.disconnect()
    quick.disconnect()  # no stream watches either: the server leaves them detached
    assert len(sandbox.commands.list()) == 2
    take_over(e2b_server, sandbox)  # the server's agent connection ends here
    open(f"{mark}.go", "w").close()  # both print, one exits, with no connection attached
    wait_for(f"{mark}.1")
    wait_for(f"{mark}.2")

    assert [p.pid for p in sandbox.commands.list()] == [handle.pid]  # quick exited: not listed
    again = sandbox.commands.connect(handle.pid)
    assert stdout_until(again, "while-detached") == "while-detached\n"  # from where it was
    with pytest.raises(CommandExitException) as exited:
        sandbox.commands.connect(quick.pid).wait()  # its output and exit, held for it
    assert (exited.value.exit_code, exited.value.stdout) == (5, "bye\n")
    sandbox.commands.send_stdin(handle.pid, "hi\n")
    assert stdout_until(again, "got hi") == "got hi\n"
    assert sandbox.commands.kill(handle.pid)
    with pytest.raises(CommandExitException) as ended:
        again.wait()
    assert (ended.value.exit_code, ended.value.error) == (-1, "signal: killed")  # as envd
    assert sandbox.commands.list() == []


def test_an_open_handle_carries_on_after_a_reconnect(
    sandbox: Sandbox, e2b_server: E2bServer
) -> None:
    mark = f"{e2b_server.scratch}/open-{sandbox.sandbox_id}"
    watched = sandbox.commands.run(
        f"echo one; while [ ! -e {mark} ]; do sleep 0.05; done; echo two", background=True
    )
    assert stdout_until(watched, "one") == "one\n"
    take_over(e2b_server, sandbox)  # the server re-attaches by itself: a stream watches
    open(mark, "w").close()
    result = watched.wait()
    assert (result.exit_code, result.stdout) == (0, "one\ntwo\n")
