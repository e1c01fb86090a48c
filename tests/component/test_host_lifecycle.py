"""One lifecycle through the host's door (`Host`), run against the QEMU driver (a real guest: vm
tier) and the local driver (the component tier's stand-in), from one test body: create, exec,
pause and resume, a snapshot, a fork from it, destroy. Where a driver cannot do a step (the local
process has no device state to save and no disk to switch), the body asks the host's
capabilities and checks that the step fails honestly and leaves the computer as it was."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.door import Host, HostError, Image, Machine, MachineSpec, PauseError
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.image import find_image
from sanbox.host.runtime import HostRuntime

from ..conftest import vm_data_dir
from .conftest import fake_image


async def sh(machine: Machine, command: str) -> str:
    result = await (await machine.client()).exec(["sh", "-c", command])
    assert result.exit_code == 0, result
    return result.stdout.decode().strip()


async def lifecycle(host: Host, image: Image) -> None:
    caps = host.capabilities()
    cid = "lc" + secrets.token_hex(4)
    spec = MachineSpec(computer_id=cid, hostname=cid, memory_mib=512)
    made: list[str] = [cid]
    try:
        machine, _disk = await host.create(spec, image)
        assert await sh(machine, "echo hi > /tmp/f; cat /tmp/f") == "hi"
        hypervisor, isolation = host.driver_facts()
        assert machine.isolation == isolation and hypervisor

        if caps.snapshot_format != "none":  # pause with memory, resume where it was
            await host.pause(machine, spec, image)
            assert host.has_saved_memory(cid)
            machine, outcome = await host.resume(spec, image)
            assert outcome.restored, outcome
            assert await sh(machine, "cat /tmp/f") == "hi"
        else:  # it cannot: says so, and runs on as it was
            with pytest.raises(PauseError):
                await host.pause(machine, spec, image)
            assert await sh(machine, "cat /tmp/f") == "hi"

        if caps.live_disk_switch:  # a snapshot of the running computer
            await host.snapshot("snp_" + cid, cid, machine, spec, image)
        else:  # refused while it runs; taken of its disk once it is stopped
            with pytest.raises(HostError):
                await host.snapshot("snp_" + cid, cid, machine, spec, image)
            assert await sh(machine, "echo still") == "still"
            assert await host.shutdown(machine) in (True, False)
            await host.snapshot("snp_" + cid, cid, None, spec, image)
        assert "snp_" + cid in host.snapshot_ids()

        child = MachineSpec(computer_id=cid + "c", hostname=cid + "c", memory_mib=512)
        made.append(child.computer_id)
        copy, _ = await host.create_from_snapshot(child, image, "snp_" + cid)
        assert await sh(copy, "hostname") == child.hostname
        await host.delete_snapshot("snp_" + cid)
        assert "snp_" + cid not in host.snapshot_ids()
    finally:
        for computer_id in made:
            await host.destroy(computer_id)
        await host.gc_layers()
    assert isinstance(host, HostRuntime)  # what it left behind is read off the runtime's own
    assert not host.attach_vm(cid) and not (host.data_dir.computers / cid).exists()
    network = host.network
    if network is not None:
        left = [n for n in network.namespaces() if network.computer_of(n) in made]
        assert not left, f"namespaces left behind: {left}"


def local_host(root: Path) -> tuple[Host, Image]:
    dd = DataDir(root / "data")
    dd.ensure()
    fake_image(dd)
    return HostRuntime(dd, LocalDriver(), networking=False), find_image(dd, "base")


def qemu_host(_root: Path) -> tuple[Host, Image]:
    dd = vm_data_dir()
    return HostRuntime(dd), find_image(dd, "base")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(local_host, id="local", marks=pytest.mark.component),
        pytest.param(qemu_host, id="qemu", marks=pytest.mark.vm),
    ],
)
def test_one_lifecycle_through_the_door(
    make: Callable[[Path], tuple[Host, Image]], short_tmp: Path
) -> None:
    host, image = make(short_tmp)
    asyncio.run(lifecycle(host, image))
