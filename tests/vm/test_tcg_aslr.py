"""SANBOX_TCG_ASLR: a guest keeps its address randomization unless the host trades it for speed
under emulation (`norandmaps` on its kernel's command line: QEMU before 8.0 translates each new
process's code afresh at its random addresses), and it keeps the mode it booted with across a
pause. A KVM guest is never affected."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from sanbox.host.agent import ExecResult
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec

from .conftest import MakeMachine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]
SETTING = "cat /proc/sys/kernel/randomize_va_space"


def _randomized(machine: Machine, run: Run) -> str:
    result: ExecResult = run(machine.agent.exec(["sh", "-c", SETTING]))
    return result.stdout.decode().strip()


def test_address_randomization_is_kept_by_default(machine: Machine, run: Run) -> None:
    assert _randomized(machine, run) == "2"


def test_the_host_can_trade_it_for_speed_under_emulation_only(
    runtime: HostRuntime, make_machine: MakeMachine, image: Image, run: Run
) -> None:
    emulated = run(runtime.hypervisor(image)).isolation == "qemu-tcg"
    kept = runtime.machines.settings
    runtime.machines.settings = dataclasses.replace(kept, tcg_aslr=False)
    try:
        traded = make_machine(memory_mib=512)
    finally:
        runtime.machines.settings = kept
    assert _randomized(traded, run) == ("0" if emulated else "2")

    spec = MachineSpec(computer_id=traded.computer_id, memory_mib=512)
    run(runtime.pause(traded, spec, image))
    resumed, outcome = run(runtime.resume(spec, image))
    traded.vm, traded.agent = resumed.vm, resumed.agent
    assert outcome.restored, outcome
    assert _randomized(traded, run) == ("0" if emulated else "2")  # the mode it booted with
