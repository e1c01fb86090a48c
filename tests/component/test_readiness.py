"""A template's readiness wait against the real agent (a local process): a check that hangs past
its own timeout is a "not yet" (it ended the browser type's build as "internal error: command did
not finish in 20.0 s"), a port passes once the agent's kernel lists a listener a dial reaches
(the service is not woken) or once the agent's own dial of it connects, the wait says how it
goes, and once it runs out its reason names what it waited for, how long, and what the last
check said."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.control import readiness
from sanbox.host.agent import AgentClient, RemoteError
from sanbox.templates.spec import Ready
from tests.conftest import free_port

from .test_agent import AgentProcess, agent

pytestmark = pytest.mark.component

__all__ = ["agent"]  # the fixture, imported


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def output(self, line: str) -> None:
        self.lines.append(line)


class Guest:
    """The agent as the wait sees a computer: its isolation and its client."""

    def __init__(self, client: AgentClient, isolation: str = "qemu-kvm") -> None:
        self._client, self.isolation = client, isolation

    async def client(self, timeout: float = 10.0) -> AgentClient:
        return self._client


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(readiness, "PROBE_TIMEOUT", 0.5)
    monkeypatch.setattr(readiness, "PROGRESS_EVERY", 0.2)
    monkeypatch.setattr(readiness, "RETRY_EVERY", 0.05)
    yield


def wait(agent: AgentProcess, ready: Ready, isolation: str = "qemu-kvm") -> Lines:
    log = Lines()

    async def main() -> None:
        client = await agent.connect()
        try:
            await readiness.wait(Guest(client, isolation), ready, log)
        finally:
            await client.close()

    asyncio.run(main())
    return log


def test_a_check_that_hangs_is_not_yet_and_the_reason_says_so(
    agent: AgentProcess, fast: None
) -> None:
    with pytest.raises(readiness.NotReadyError) as caught:
        wait(agent, Ready(port=None, command="sleep 30", timeout=1.5))
    reason = str(caught.value)
    assert "waited 2s for `sleep 30` to succeed" in reason
    assert "did not answer in 0s" in reason or "ran over" in reason


def test_a_command_that_starts_passing_is_ready_with_progress(
    agent: AgentProcess, fast: None, tmp_path: Path
) -> None:
    flag = tmp_path / "up"

    class Lifting(Lines):  # the check passes once the log has said it is still waiting
        def output(self, line: str) -> None:
            super().output(line)
            if line.startswith("[sanbox] still waiting for"):
                flag.touch()

    log = Lifting()

    async def main() -> None:
        client = await agent.connect()
        try:
            await readiness.wait(Guest(client), Ready(None, f"test -e {flag}", 20), log)
        finally:
            await client.close()

    asyncio.run(main())
    waiting = [line for line in log.lines if line.startswith("[sanbox] still waiting for")]
    assert waiting and all(line.endswith("exit code 1") for line in waiting), log.lines
    assert log.lines[-1].startswith("[sanbox] ready after")


def test_a_port_is_dialled_by_the_agent_once_it_listens(agent: AgentProcess, fast: None) -> None:
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        server.bind(("127.0.0.1", port))
        server.listen()

    threading.Timer(0.6, listen_later).start()
    try:
        log = wait(agent, Ready(port=port, command=None, timeout=20))
    finally:
        server.close()
    assert log.lines[-1] == f"[sanbox] ready after {log.lines[-1].split()[3]} port {port} to answer"


def test_an_emulated_guest_waits_longer_and_says_why(agent: AgentProcess, fast: None) -> None:
    with pytest.raises(readiness.NotReadyError) as caught:
        wait(agent, Ready(port=free_port(), command=None, timeout=0.2), "qemu-tcg")
    assert "waited 1s" in str(caught.value)  # 0.2 s x 4
    assert readiness.slowdown("qemu-tcg") == readiness.EMULATION_FACTOR
    assert readiness.slowdown("qemu-kvm") == readiness.slowdown("firecracker-kvm") == 1


def probe(agent: AgentProcess, port: int) -> tuple[bool, str | None]:
    """What the agent says of `port` (`listening`), and one readiness check of it."""

    async def main() -> tuple[bool, str | None]:
        client = await agent.connect()
        try:
            seen = await client.listening(port)
            return seen, await readiness.probe(Guest(client), Ready(port, None, 5))
        finally:
            await client.close()

    return asyncio.run(main())


def dialled(server: socket.socket) -> bool:
    """Whether a connection waits in `server`'s accept queue (someone dialled it)."""
    return bool(select.select([server], [], [], 0.3)[0])


def listener(address: str, port: int) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen()
    return server


def test_a_listening_port_passes_without_a_dial(agent: AgentProcess) -> None:
    port = free_port()
    with listener("127.0.0.1", port) as server:
        assert probe(agent, port) == (True, None)
        assert not dialled(server)  # the service was asked nothing


def test_a_listener_a_dial_does_not_reach_is_dialled_and_the_dial_answers(
    agent: AgentProcess,
) -> None:
    port = free_port()
    with listener("127.0.0.2", port):  # the check's dial goes to 127.0.0.1
        seen, said = probe(agent, port)
    assert not seen
    assert said is not None and "refused" in said


def test_an_agent_that_cannot_say_has_the_port_dialled(
    agent: AgentProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent from before `listening` (a saved guest's) answers `bad_request`: the port is
    dialled, as before."""
    call = AgentClient.call

    async def older(
        self: AgentClient, kind: str, params: dict[str, object], **kw: object
    ) -> object:
        if params.get("op") == "listening":
            raise RemoteError("bad_request", "unknown control op 'listening'")
        return await call(self, kind, params, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(AgentClient, "call", older)
    port = free_port()
    with listener("127.0.0.1", port) as server:
        assert probe(agent, port) == (False, None)
        assert dialled(server)
