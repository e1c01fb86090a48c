"""A hostile guest that escapes into QEMU finds itself in a seccomp sandbox, as an unprivileged
user with no capabilities, inside cgroups that cap its CPU, memory and processes, with its RAM file
closed to other users; and a full data filesystem stops only the computer that hit it."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sanbox import Sanbox
from sanbox.host.drivers.cgroup import limit_files, limits_for
from sanbox.host.drivers.confine import OOM_SCORE_ADJ, VM_USER, is_vm_uid
from sanbox.host.drivers.qemu import QemuHypervisor
from sanbox.host.runtime import HostRuntime, Machine

from .server import ServerProcess

pytestmark = pytest.mark.vm
Run = Callable[..., Any]


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_qemu_runs_sandboxed_as_an_unprivileged_user(machine: Machine) -> None:
    st = status(machine.vm.pid)
    assert st["Seccomp"] == "2"  # a seccomp filter is in force
    uids = {int(u) for u in st["Uid"].split()}
    assert len(uids) == 1 and is_vm_uid(uids.pop()), f"QEMU runs with uid {st['Uid']}"
    assert {int(g) for g in st["Gid"].split()} == {pwd.getpwnam(VM_USER).pw_gid}
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0
    assert st["NoNewPrivs"] == "1"
    # the OOM killer's choice before the control plane, whose score stays its own
    oom = Path(f"/proc/{machine.vm.pid}/oom_score_adj").read_text().strip()
    assert int(oom) == OOM_SCORE_ADJ > int(Path("/proc/self/oom_score_adj").read_text())


def test_its_ram_file_and_folder_are_closed_to_other_users(
    machine: Machine, runtime: HostRuntime
) -> None:
    uid = int(status(machine.vm.pid)["Uid"].split()[0])
    ram = runtime.data_dir.ram_file(machine.computer_id).stat()
    assert (ram.st_mode & 0o777, ram.st_uid) == (0o600, uid)
    disk = machine.dir.disk.stat()
    assert (disk.st_mode & 0o777, disk.st_uid) == (0o600, uid)
    assert machine.dir.root.stat().st_mode & 0o077 == 0o011  # others pass through, never list
    assert machine.dir.run.stat().st_mode & 0o077 == 0


def test_each_vm_has_its_own_cgroups_with_its_limits(
    machine: Machine, runtime: HostRuntime
) -> None:
    if not runtime.cgroups.placed:
        pytest.skip(f"no cgroup controllers on this host: {runtime.cgroups.describe()}")
    name = runtime.machines.cgroup_name(machine.computer_id)
    assert machine.vm.pid in runtime.cgroups.procs(name)
    accel = machine.isolation.removeprefix("qemu-")  # the VM's memory.max counts TCG's cache
    limits = limits_for(1, 512, QemuHypervisor(accel).capabilities.memory_overhead_mib)
    checked = set()
    for controller, h in runtime.cgroups.placed.items():
        cg = h.root / "sanbox.slice" / name
        for file, value in limit_files(limits, controller, h.version).items():
            if controller == "io" and not (cg / file).exists():
                continue
            assert (cg / file).read_text().strip() == value, file
            checked.add(controller)
    assert {"cpu", "memory", "pids"} <= checked
    own = Path(f"/proc/{machine.vm.pid}/cgroup").read_text()
    assert f"sanbox.slice/{name}" in own


def test_the_host_says_what_confines_its_vms(client: Sanbox) -> None:
    confinement = client.host().confinement
    assert confinement is not None
    assert confinement["seccomp"].startswith("on,") and "spawn=deny" in confinement["seccomp"]
    assert VM_USER in confinement["user"]
    assert set(confinement["cgroups"]) == {"cpu", "memory", "pids", "io"}
    assert "werror=stop" in confinement["disk_errors"]


def wait_for(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def allocated(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def test_a_full_data_filesystem_stops_only_the_computer_that_filled_it(
    server: ServerProcess, client: Sanbox
) -> None:
    """The writer's folder sits on a small filesystem of its own; it writes until that is full.
    Its guest stops (not fed a disk error, not left frozen as `running`) and the computer goes
    to `error` with the reason; its neighbour keeps running."""
    writer = client.computers.create(name="filler", memory_mib=384)
    neighbour = client.computers.create(name="neighbour", memory_mib=384)
    uids = {qemu_uid(server.data_dir.computers / c.id) for c in (writer, neighbour)}
    assert len(uids) == 2  # one escaped QEMU cannot open, signal or trace the other
    writer.stop()
    folder = server.data_dir.computers / writer.id
    saved = Path(tempfile.mkdtemp(prefix="sbfull"))
    subprocess.run(["cp", "-a", "--sparse=always", f"{folder}/.", str(saved)], check=True)
    size = allocated(saved) + 48 * 1024**2
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        subprocess.run(["cp", "-a", "--sparse=always", f"{saved}/.", str(folder)], check=True)
        writer.start()
        writer.exec(
            "nohup dd if=/dev/zero of=/root/big bs=1M count=400 conv=fsync >/dev/null 2>&1 &"
        )
        wait_for(lambda: client.computers.get("filler").state == "error", "filler: error", 180)
        record = client.computers.get("filler")
        assert record.last_error is not None and "no space left" in record.last_error
        assert "free space" in record.last_error
        assert neighbour.exec("echo alive").stdout == "alive\n"
        assert client.computers.get("neighbour").state == "running"
    finally:
        wait_for(lambda: not any(str(folder) in _cmdline(p) for p in _pids()), "no VM", 30)
        subprocess.run(["umount", str(folder)], check=True)
        shutil.rmtree(saved, ignore_errors=True)
    writer.start()  # once there is room again it boots on its disk
    assert writer.exec("echo back").stdout == "back\n"
    writer.delete()
    neighbour.delete()


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def qemu_uid(folder: Path) -> int:
    pid = int((folder / "run" / "vm.pid").read_text())
    return int(status(pid)["Uid"].split()[0])
