"""Forks that fail part-way leave the source as it was and no fork behind: the data filesystem
full while the fork's snapshot is written, the source's QEMU killed under the fork, and one
child that cannot start (on QEMU >= 8.2 after the memory all of them map was checked once). A
fork's QEMU killed as soon as the fork answered boots from its disk with its new identity."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from sanbox.host.errors import HostError
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec

from .conftest import MakeMachine
from .test_snapshots_host import MEMORY_MIB, Run, new_id, sh, spec_of

pytestmark = pytest.mark.vm


def children(runtime: HostRuntime, n: int) -> list[MachineSpec]:
    specs = [
        MachineSpec(computer_id=new_id("fk"), hostname=f"fork-{i}", memory_mib=MEMORY_MIB)
        for i in range(n)
    ]
    runtime.created.extend(s.computer_id for s in specs)  # type: ignore[attr-defined]
    return specs


@pytest.fixture
def source(make_machine: MakeMachine, runtime: HostRuntime, run: Run) -> Iterator[Machine]:
    """A computer to fork, destroyed afterwards with the layers only it stood on (a failed
    fork leaves its disk on a frozen layer: other modules expect an empty layer store)."""
    machine = make_machine(memory_mib=MEMORY_MIB)
    yield machine
    with contextlib.suppress(Exception):
        run(machine.agent.close())
    run(runtime.destroy(machine.computer_id))
    run(runtime.gc_layers())


def nothing_of(runtime: HostRuntime, specs: list[MachineSpec]) -> None:
    on_host = set(runtime.data_dir.computer_ids())
    assert not {s.computer_id for s in specs} & on_host, "a fork was left behind"
    assert not list(runtime.data_dir.snapshots.glob(".tmp-*")), "a half-written snapshot"


def test_a_full_disk_during_a_fork_leaves_the_source_running_and_no_fork(
    source: Machine, runtime: HostRuntime, image: Image, run: Run, data_dir: Any
) -> None:
    sh(run, source, "head -c 8M /dev/urandom > /run/fill; echo before > /root/f; sync")
    runtime.snapshots.ensure()
    specs = children(runtime, 2)
    subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=1m,mode=0700",
            "sanbox-enospc",
            str(data_dir.snapshots),
        ],
        check=True,
    )
    try:
        with pytest.raises(HostError, match="No space left"):
            run(runtime.fork(source, spec_of(source), image, specs, memory=True))
    finally:
        subprocess.run(["umount", str(data_dir.snapshots)], check=True)
    nothing_of(runtime, specs)
    assert sh(run, source, "cat /root/f; echo after > /root/f; sync; cat /root/f") == (
        "before\nafter"
    )


def test_a_killed_source_mid_fork_leaves_no_fork_and_a_good_disk(
    source: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    sh(run, source, "echo before > /root/f; sync")
    specs = children(runtime, 2)

    async def fork_and_kill() -> None:
        task = asyncio.ensure_future(
            runtime.fork(source, spec_of(source), image, specs, memory=True)
        )
        await asyncio.sleep(0)  # the fork has started: the source's VM is killed under it
        os.kill(source.vm.pid, signal.SIGKILL)
        await task

    with pytest.raises((HostError, OSError)):
        run(fork_and_kill())
    nothing_of(runtime, specs)
    run(runtime.kill(source.computer_id))
    booted = run(runtime.start(spec_of(source), image))
    try:
        assert sh(run, booted, "cat /root/f") == "before"
    finally:
        run(booted.agent.close())


def test_a_child_that_cannot_start_leaves_no_fork_and_no_ram_file(
    source: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """A child that fails (its folder is taken) takes the others down with it: no fork, no RAM
    file, the source as it was."""
    sh(run, source, "echo before > /root/f; sync")
    specs = children(runtime, 2)
    taken = runtime.data_dir.computer(specs[1].computer_id).root
    taken.mkdir(parents=True)
    try:
        with pytest.raises(HostError, match="already exists"):
            run(runtime.fork(source, spec_of(source), image, specs, memory=True))
    finally:
        shutil.rmtree(taken)
    nothing_of(runtime, specs)
    assert not [s for s in specs if runtime.data_dir.ram_file(s.computer_id).exists()]
    assert sh(run, source, "cat /root/f") == "before"


def test_a_forks_identity_is_on_its_disk_when_its_qemu_dies(
    source: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """The identity is synced before the fork answers (guest identity.py): a child killed at
    once boots from its disk with its own machine-id and none of its source's SSH host keys."""
    run(source.agent.ssh.host_key())  # the source has a host key on its disk
    source_id = sh(run, source, "cat /etc/machine-id")
    (spec,) = children(runtime, 1)
    (child,) = run(runtime.fork(source, spec_of(source), image, [spec], memory=True), 600)
    run(child.agent.close())
    run(runtime.kill(spec.computer_id))  # no shutdown, nothing asked of it: nothing more written
    booted = run(runtime.start(spec, image))
    try:
        machine_id = sh(run, booted, "cat /etc/machine-id")
        assert len(machine_id) == 32 and machine_id != source_id
        assert sh(run, booted, "ls /etc/ssh | grep -c ^ssh_host_ || true") == "0"
    finally:
        run(booted.agent.close())
        run(runtime.destroy(spec.computer_id))
