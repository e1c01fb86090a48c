"""The host agent's shared guest connection (fleet/link/mux.py) against a real guest agent
process: several clients hold streams to one guest at once (the guest itself serves one
connection, and a second direct one ends the first); a client that goes has its streams closed
at the guest and leaves the others running; a guest agent that restarts ends every client, and
the next dial reaches the new one."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path

import pytest

from sanbox.fleet.link.mux import GuestMuxes
from sanbox.host.agent import AgentClient, AgentError
from sanbox.host.agent.dial import Dial, unix_dial

from .test_agent import AgentProcess
from .test_agent import agent as agent  # the fixture: a guest agent on a Unix socket

pytestmark = pytest.mark.component


def _run(coro: Coroutine[object, object, None]) -> None:
    asyncio.run(coro)


def test_clients_share_one_guest_connection(agent: AgentProcess, tmp_path: Path) -> None:
    async def main() -> None:
        muxes = GuestMuxes()
        dial = muxes.dial("c1", unix_dial(agent.socket))
        one = await AgentClient.dial(dial, "c1", timeout=10)
        two = await AgentClient.dial(dial, "c1", timeout=10)
        try:
            slow = asyncio.ensure_future(one.exec(["sh", "-c", "sleep 1 && echo one"]))
            await asyncio.sleep(0)  # its OPEN is on the wire before the others
            for i in range(5):
                done = await two.exec(["echo", str(i)])
                assert done.stdout == f"{i}\n".encode()
            assert (await slow).stdout == b"one\n", "a second client ended the first's stream"

            # a client that goes: its stream is closed at the guest, the other runs on
            marker = tmp_path / "ran-on"
            await one.exec_stream(["sh", "-c", f"sleep 30; touch {marker}"])
            await two.exec(["true"])
            await one.close()
            mine = ["pgrep", "-f", f"touch {marker}"]  # not another test's sleep on this host
            pids = await two.exec(mine)
            for _ in range(100):
                if pids.exit_code != 0:
                    break
                await asyncio.sleep(0.05)
                pids = await two.exec(mine)
            assert pids.exit_code != 0, "the gone client's process still runs"
            assert not marker.exists()
            assert (await two.exec(["echo", "still"])).stdout == b"still\n"

            # a direct client (as the guest's only connection) would end the shared one:
            # the shared one's clients fail, and a dial through it reaches the guest again
            direct = await agent.connect()
            await direct.close()
            await _ended(two)
            await _answers_again(dial, b"back")
        finally:
            await one.close()
            await two.close()
            await muxes.close()

    _run(main())


def test_a_restarted_guest_agent_ends_every_client(agent: AgentProcess) -> None:
    async def main() -> None:
        muxes = GuestMuxes()
        dial = muxes.dial("c1", unix_dial(agent.socket))
        one = await AgentClient.dial(dial, "c1", timeout=10)
        two = await AgentClient.dial(dial, "c1", timeout=10)
        try:
            assert (await one.exec(["true"])).exit_code == 0
            agent.kill()
            agent.start()
            for client in (one, two):
                await _ended(client)
            await _answers_again(dial, b"new")
        finally:
            await one.close()
            await two.close()
            await muxes.close()

    _run(main())


async def _ended(client: AgentClient) -> None:
    """The client's connection ends within 5 s (its next calls fail)."""
    with pytest.raises(AgentError):
        for _ in range(100):
            await client.exec(["true"])
            await asyncio.sleep(0.05)


async def _answers_again(dial: Dial, word: bytes) -> None:
    """A new dial through the shared connection reaches the guest agent."""
    again = await AgentClient.dial(dial, "c1", timeout=20)
    try:
        assert (await again.exec(["echo", word.decode()])).stdout == word + b"\n"
    finally:
        await again.close()
