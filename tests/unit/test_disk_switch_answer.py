"""A live disk switch QEMU did not answer (a drain on a slow disk can outlast the wait) is asked
about on a new monitor connection: on the overlay, it succeeded; still on the old disk, it failed
and the overlay's node goes; no answer at all, its outcome is unknown (`SwitchUnknownError`:
the caller must not take the overlay away)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from sanbox.host.drivers import SwitchUnknownError
from sanbox.host.drivers.qemu import blockops
from sanbox.host.drivers.qemu.qmp import Monitored, QmpError, QmpNoAnswer

pytestmark = pytest.mark.unit
OVERLAY = Path("/data/layers/new.qcow2")


class Monitor:
    def __init__(self, vm: Vm) -> None:
        self.vm = vm

    async def execute(self, command: str, timeout: float = 30.0, **args: Any) -> Any:
        self.vm.sent.append(command)
        if command == "blockdev-snapshot":
            raise QmpNoAnswer("QEMU did not answer blockdev-snapshot within 60s")
        if command == "query-block":
            return [{"device": "root", "inserted": {"file": self.vm.top}}]
        return None

    async def close(self) -> None:
        self.vm.connected -= 1


class Vm:
    """A QEMU process as switch_disk uses it (its monitor only: cast to Monitored for it)."""

    pid = 1

    def __init__(self, top: str, answers_again: bool = True) -> None:
        self.top, self.answers_again = top, answers_again
        self.sent: list[str] = []
        self.dialled = self.connected = 0

    async def qmp(self, timeout: float = 10.0) -> Monitor:
        """As QEMU's monitor: one client at a time (a second gets no greeting)."""
        self.dialled += 1
        if self.connected or (self.dialled > 1 and not self.answers_again):
            raise QmpError("QEMU's monitor does not accept")
        self.connected += 1
        return Monitor(self)


def test_switched_after_all_is_a_success() -> None:
    vm = Vm(top=str(OVERLAY))
    asyncio.run(blockops.switch_disk(cast(Monitored, vm), OVERLAY))
    assert vm.sent == ["blockdev-add", "blockdev-snapshot", "query-block"]


def test_still_on_the_old_disk_fails_and_the_node_goes() -> None:
    vm = Vm(top="/data/computers/c/disk.qcow2")
    with pytest.raises(QmpNoAnswer):
        asyncio.run(blockops.switch_disk(cast(Monitored, vm), OVERLAY))
    assert vm.sent[-1] == "blockdev-del"


def test_no_answer_again_is_unknown() -> None:
    vm = Vm(top=str(OVERLAY), answers_again=False)
    with pytest.raises(SwitchUnknownError):
        asyncio.run(blockops.switch_disk(cast(Monitored, vm), OVERLAY))
    assert "blockdev-del" not in vm.sent
