from collections.abc import Callable
from typing import Any

import pytest

from sanbox.host.drivers import VmNotRunningError
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, MachineSpec

from .conftest import MakeMachine

pytestmark = pytest.mark.vm
Run = Callable[..., Any]


def test_disk_survives_shutdown_and_boot(
    make_machine: MakeMachine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    machine = make_machine(disk_gib=10)
    run(machine.agent.files.put("/root/keep.txt", b"still here\n"))
    size = run(machine.agent.exec("df -B1 --output=size / | tail -1")).stdout
    assert int(size) > 9 * 1024**3  # the guest grew its filesystem to the 10 GiB disk
    assert run(runtime.shutdown(machine)) is True  # powered off by itself, not killed
    assert not machine.vm.alive()
    assert runtime.attach_vm(machine.computer_id) is None
    with pytest.raises(VmNotRunningError, match="start it"):
        run(machine.client())
    again = run(runtime.start(MachineSpec(computer_id=machine.computer_id), image))
    runtime.booted.append(again)  # type: ignore[attr-defined]
    assert run(again.agent.files.read("/root/keep.txt")) == b"still here\n"
    # a new caller (say, a restarted server) re-attaches to the running VM by its run dir
    run(again.agent.close())
    fresh = HostRuntime(runtime.data_dir)
    attached = run(fresh.attach(machine.computer_id))
    assert attached is not None and attached.vm.pid == again.vm.pid
    assert run(attached.agent.exec(["cat", "/root/keep.txt"])).stdout == b"still here\n"
    run(attached.agent.close())
    run(runtime.destroy(machine.computer_id))
    assert not machine.dir.root.exists()
    assert runtime.attach_vm(machine.computer_id) is None
