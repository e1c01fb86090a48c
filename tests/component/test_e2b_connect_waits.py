"""E2B's `connect` of a sandbox on its way to rest (an auto-pause, a stop under way) waits for
that to end, then resumes or starts it (201): it answered 200 at once and the sandbox ended at
rest, the SDK's next command refused. The stand-in's VM keeps no memory, so its pause and stop
are held here until the test lets them end (a pause that ends the VM; a resume then boots it
afresh on its disk)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from sanbox.host.machines.machine import Machine
from sanbox.host.runtime import HostRuntime

from .conftest import E2bStand, still_waiting

pytestmark = pytest.mark.component


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Every pause and stop of the stand-in's VMs held until the event is set (10 s at most)."""
    release = threading.Event()
    shutdown = HostRuntime.shutdown

    async def held_pause(self: HostRuntime, machine: Machine, *_args: Any) -> Any:
        await asyncio.to_thread(release.wait, 10)
        await machine.vm.kill()  # its memory "saved": the VM ends, as a pause's does
        return SimpleNamespace(size=0, seconds=0.0)

    async def held_shutdown(self: HostRuntime, machine: Machine, *args: Any) -> bool:
        await asyncio.to_thread(release.wait, 10)
        return await shutdown(self, machine, *args)

    monkeypatch.setattr(HostRuntime, "pause", held_pause)
    monkeypatch.setattr(HostRuntime, "shutdown", held_shutdown)
    yield release
    release.set()


def state(e2b: E2bStand, computer: str) -> str:
    return str(e2b.client.get(f"/v1/computers/{computer}", headers=e2b.v1).json()["state"])


@pytest.mark.parametrize(("memory", "under_way"), [(True, "pausing"), (False, "stopping")])
def test_connect_during_a_pause_or_stop_waits_then_brings_it_up(
    e2b: E2bStand, gate: threading.Event, memory: bool, under_way: str
) -> None:
    sandbox, _ = e2b.create()
    computer = sandbox.replace("-", "_", 1)
    answers: dict[str, Any] = {}

    def call(name: str, path: str, body: dict[str, Any]) -> threading.Thread:
        def run() -> None:
            answers[name] = e2b.client.post(path, headers=e2b.api, json=body)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    pausing = call("pause", f"/e2b/sandboxes/{sandbox}/pause", {"memory": memory})
    deadline = time.monotonic() + 10
    while state(e2b, computer) != under_way:
        assert time.monotonic() < deadline, f"never {under_way}"
        time.sleep(0.05)
    connecting = call("connect", f"/e2b/sandboxes/{sandbox}/connect", {"timeout": 300})
    still_waiting(connecting, gate, f"connect answered while {under_way}")
    pausing.join(20)
    connecting.join(20)
    assert answers["pause"].status_code == 204, answers["pause"].text
    assert answers["connect"].status_code == 201, answers["connect"].text
    assert state(e2b, computer) == "running"
