import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from sanbox.host.agent import AgentUnavailableError
from sanbox.host.runtime import Machine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]


def test_an_agent_restart_fails_pending_calls_then_reconnects(machine: Machine, run: Run) -> None:
    async def scenario() -> float:
        proc = await machine.agent.exec_stream(["sleep", "300"])
        await machine.agent.exec("(sleep 0.3; pkill -9 -f sanbox_guest.agent) >/dev/null 2>&1 &")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(AgentUnavailableError, match="restarted|lost|closed"):
            await proc.wait(timeout=60)
        return loop.time() - t0

    took = run(scenario(), 90)
    assert took < 30  # told, not left to time out
    client = run(machine.client(timeout=30))
    assert run(client.exec(["echo", "back"])).stdout == b"back\n"
