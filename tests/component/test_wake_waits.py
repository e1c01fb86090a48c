"""A command that reaches a computer while the idle watcher suspends it waits for that to end and
is served (it was refused 409 `computer_not_running`, its hint to start a computer that could not
be started then): the agent's command is not lost to the suspension it raced."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sanbox.host.runtime import HostRuntime
from sanbox.host.saved.memory import PauseError

from .conftest import Server

pytestmark = pytest.mark.component


def test_a_command_during_a_suspension_waits_and_is_served(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow_failing_pause(self: HostRuntime, *_args: Any) -> None:
        await asyncio.sleep(1.5)  # the stand-in keeps no memory: it fails, the VM runs on
        raise PauseError("the stand-in saves no memory")

    monkeypatch.setattr(HostRuntime, "pause", slow_failing_pause)
    h = server.headers()
    made = server.client.post("/v1/computers", json={"name": "w", "idle_timeout": 1}, headers=h)
    assert made.status_code == 201, made.text
    deadline = time.monotonic() + 30
    while server.client.get("/v1/computers/w", headers=h).json()["state"] != "pausing":
        assert time.monotonic() < deadline, "never suspended"
        time.sleep(0.05)
    ran = server.client.post("/v1/computers/w/exec", json={"cmd": ["echo", "served"]}, headers=h)
    assert ran.status_code == 200, ran.text
    assert ran.json()["stdout"] == "served\n"
    assert server.client.delete("/v1/computers/w", headers=h).status_code in (200, 202, 204)
