"""A VM's hypervisor holds memory of its own beside the guest's RAM (QEMU's heap and device state,
under TCG its translated-code cache), outside the RAM dir where its free space does not show it.
Admission counts it for every running VM and for each new one, against the RAM dir: its size is
the budget for guests' RAM and their hypervisors together. Without it, many small computers were
admitted into more memory than the host has, and the OOM killer ended guests."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from sanbox.control.capacity import Capacity, admit
from sanbox.control.errors import InsufficientStorageError
from sanbox.control.hosts import capacity_of
from sanbox.fleet.link import wire
from sanbox.fleet.link.room import HostRoom
from sanbox.fleet.placement import HostLoad, Policy, Request, eligible
from sanbox.host.data import space
from sanbox.host.data.layout import DataDir
from sanbox.host.data.space import Room
from sanbox.host.door import HostFullError
from sanbox.host.drivers.firecracker.driver import capabilities as firecracker_capabilities
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.drivers.qemu import QemuHypervisor
from sanbox.host.drivers.qemu.argv import TCG_CODE_CACHE_MIB
from sanbox.host.runtime import HostRuntime
from sanbox.host.settings import HostSettings, SettingsError

pytestmark = pytest.mark.unit

MIB = 1024**2
SHM = Path("/dev/shm")
NO_PID = 2**22 + 1  # above any pid_max: no such process


def test_each_driver_states_its_hypervisor_s_overhead() -> None:
    """QEMU under TCG: its code cache and a base; under KVM: the base; Firecracker: a little;
    the local stand-in runs no hypervisor."""
    tcg, kvm = QemuHypervisor("tcg").capabilities, QemuHypervisor("kvm").capabilities
    assert tcg.hypervisor_memory_mib == kvm.hypervisor_memory_mib + TCG_CODE_CACHE_MIB == 320
    assert kvm.hypervisor_memory_mib == 64
    assert firecracker_capabilities().hypervisor_memory_mib == 16
    assert LocalDriver().capabilities.hypervisor_memory_mib == 0


@pytest.mark.parametrize(
    ("memory_mib", "vms", "promised_mib", "refused"),
    [
        (704, 1, 0, False),  # 704 + 320: exactly the 1024 free
        (705, 1, 0, True),  # fits by RAM alone, not with its hypervisor
        (192, 1, 512, False),  # running guests' RAM and hypervisors promised 512
        (193, 1, 512, True),
        (384, 2, 0, False),  # a fork of two: 384 of RAM and two hypervisors
        (385, 2, 0, True),
    ],
)
def test_a_new_vm_is_admitted_for_its_ram_and_its_hypervisor(
    memory_mib: int, vms: int, promised_mib: int, refused: bool
) -> None:
    ram = Room(SHM, 1024 * MIB, promised_mib * MIB, 320 * MIB, "qemu-tcg")
    if not refused:
        admit(memory_mib * MIB, ram, vms=vms)
        return
    with pytest.raises(InsufficientStorageError) as caught:
        admit(memory_mib * MIB, ram, vms=vms)
    assert (caught.value.code, caught.value.status) == ("insufficient_memory", 507)


def test_the_refusal_says_the_ram_the_overhead_and_what_to_do() -> None:
    ram = Room(SHM, 1024 * MIB, 256 * MIB, 320 * MIB, "qemu-tcg")
    with pytest.raises(InsufficientStorageError) as caught:
        admit(512 * MIB, ram)
    assert caught.value.message == (
        "512 MiB of guest memory and 320 MiB for its hypervisor (qemu-tcg) do not fit in "
        "/dev/shm: 1024 MiB free, 256 MiB of it promised to running computers' memory and "
        "hypervisors. Stop or pause a computer, ask for less memory, or grow /dev/shm (its size "
        "is the budget for guests' memory and their hypervisors)"
    )
    with pytest.raises(InsufficientStorageError, match="640 MiB for their 2 hypervisors"):
        admit(256 * MIB, ram, vms=2)
    with pytest.raises(InsufficientStorageError, match="^2048 MiB of guest memory does not fit"):
        admit(2048 * MIB, Room(SHM, 1024 * MIB, 0))  # no overhead: said as before


def test_a_pause_or_snapshot_starts_no_hypervisor() -> None:
    """No RAM asked, no VM started: the overhead is not checked either."""
    admit(0, Room(SHM, 0, 0, 320 * MIB, "qemu-tcg"), 0, Room(SHM, 10 * MIB, 0), saved_bytes=MIB)


def data_dir_with_vms(tmp_path: Path) -> DataDir:
    """A data dir with a running VM (`vm.pid` names a live process: this one), one that ended
    without us (its pid names none), one that never ran, and a RAM dir with nothing in it."""
    ram_dir = tmp_path / "shm"
    ram_dir.mkdir()
    dd = DataDir(tmp_path / "data", ram_dir)
    for computer_id, pid in (("running", os.getpid()), ("ended", NO_PID), ("stopped", None)):
        run = dd.computer(computer_id).run
        run.mkdir(parents=True)
        if pid is not None:
            (run / "vm.pid").write_text(f"{pid}\n")
    return dd


def test_every_running_vm_s_hypervisor_is_promised_against_the_ram_dir(tmp_path: Path) -> None:
    dd = data_dir_with_vms(tmp_path)
    room = space.ram_room(dd.ram_dir, None, dd, 100 * MIB, "qemu-kvm")
    assert (room.promised, room.overhead, room.hypervisor) == (100 * MIB, 100 * MIB, "qemu-kvm")
    assert space.ram_room(dd.ram_dir, "running", dd, 100 * MIB).promised == 0  # its own
    assert space.ram_room(dd.ram_dir, None, dd).promised == 0  # no overhead: as before
    assert space.ram_room(dd.ram_dir, None, None, 100 * MIB).promised == 0  # no VMs known


def test_a_shared_ram_dir_counts_every_host_agent_s_hypervisors(tmp_path: Path) -> None:
    """Two host agents on one machine sharing a RAM dir (the default, /dev/shm): each counts the
    other's running VMs' hypervisors by their RAM files, its own by its run dirs, none twice."""
    dd = data_dir_with_vms(tmp_path)
    other = DataDir(tmp_path / "other", dd.ram_dir)
    other.ram_file("theirs").write_bytes(b"")  # another agent's running guest (its RAM file)
    dd.ram_file("running").write_bytes(b"")  # this one's running guest has its RAM file too
    room = space.ram_room(dd.ram_dir, None, dd, 100 * MIB)
    assert room.promised == 200 * MIB  # theirs and ours, each once
    assert space.ram_room(dd.ram_dir, None, other, 100 * MIB).promised == 200 * MIB
    assert space.ram_room(dd.ram_dir, "theirs", dd, 100 * MIB).promised == 100 * MIB


def test_the_operator_s_setting_overrides_the_driver_s_estimate(tmp_path: Path) -> None:
    dd = data_dir_with_vms(tmp_path)
    assert HostSettings.from_env({}).vm_overhead_mib is None
    settings = HostSettings.from_env({"SANBOX_VM_OVERHEAD_MIB": " 200 "})
    assert settings.vm_overhead_mib == 200
    assert HostSettings.from_env({"SANBOX_VM_OVERHEAD_MIB": "0"}).vm_overhead_mib == 0
    ram, _ = HostRuntime(dd, LocalDriver(), False, settings).room(disk=False)
    assert (ram.overhead, ram.promised, ram.hypervisor) == (200 * MIB, 200 * MIB, "local-process")
    ram, _ = HostRuntime(dd, QemuHypervisor("kvm"), False, HostSettings()).room(disk=False)
    assert (ram.overhead, ram.promised, ram.hypervisor) == (64 * MIB, 64 * MIB, "qemu-kvm")


@pytest.mark.parametrize("value", ["-1", "64M", "lots", str(1024 * 1024 + 1)])
def test_an_overhead_that_is_not_a_number_of_mib_stops_the_host(value: str) -> None:
    with pytest.raises(SettingsError, match="SANBOX_VM_OVERHEAD_MIB"):
        HostSettings.from_env({"SANBOX_VM_OVERHEAD_MIB": value})


def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overhead_mib: int) -> HostRuntime:
    """A host with one running VM and 1024 MiB free in its RAM dir."""
    monkeypatch.setattr(space, "_free", lambda path: 1024 * MIB)
    settings = HostSettings(vm_overhead_mib=overhead_mib)
    return HostRuntime(data_dir_with_vms(tmp_path), LocalDriver(), False, settings)


def test_held_room_counts_each_vm_s_overhead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create admitted but not yet running holds its hypervisor's overhead too, and a fork's
    children one each: concurrent admissions cannot together promise more than there is."""
    host, capacity = runtime(tmp_path, monkeypatch, 100), Capacity(2, 64 * 1024)
    with capacity.admit_here(host, 128, 0, None, vms=3):  # 1024 - 100 running: 128 + 300 fit
        assert capacity.ledger.totals() == ((128 + 300) * MIB, 0, 0)
        with pytest.raises(InsufficientStorageError, match="528 MiB of it promised"):
            capacity.admit_here(host, 400, 0)  # 400 + 100 > 1024 - 100 - 428
        capacity.admit_here(host, 396, 0).release()
    with capacity.admit_pause(host, 512):  # a pause starts no hypervisor
        assert capacity.ledger.totals() == (0, 0, 512 * MIB)


class Reported:
    """A fleet host as the control plane sees it: its room from its report, over the wire."""

    def __init__(self, host: HostRuntime) -> None:
        self.report = {"ram": wire.room_out(host.room(disk=False)[0]), "disk": None}

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        ram = wire.room_in(self.report["ram"])
        assert ram is not None
        return ram, None

    def admission(self) -> tuple[float, int] | None:
        return 1.0, 0


def test_a_fleet_host_and_the_control_plane_count_its_overhead_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's report carries its running VMs' overhead (in what is promised) and a new VM's:
    the control plane admits by it what the host agent admits itself, and refuses the same."""
    host = runtime(tmp_path, monkeypatch, 300)
    reported, (ram, _) = Reported(host), host.room(disk=False)
    assert reported.room()[0] == ram
    assert (ram.free, ram.promised, ram.overhead) == (1024 * MIB, 300 * MIB, 300 * MIB)
    agent, control = HostRoom(host), Capacity(2, 64 * 1024)
    with agent.held(424):  # 1024 - 300 running - 300 its own
        pass
    control.admit_here(reported, 424).release()  # type: ignore[arg-type]
    refusal = "insufficient_memory: 425 MiB of guest memory and"
    with pytest.raises(HostFullError, match=refusal), agent.held(425):
        pass
    with pytest.raises(InsufficientStorageError, match="300 MiB for its hypervisor"):
        control.admit_here(reported, 425)  # type: ignore[arg-type]
    with pytest.raises(HostFullError, match="for their 2 hypervisors"), agent.held(125, vms=2):
        pass
    with agent.held(62, vms=2):  # a fork's two children: 62 of RAM, 600 for hypervisors
        assert agent.capacity.ledger.totals() == (662 * MIB, 0, 0)


def test_a_host_agent_from_before_counts_no_overhead() -> None:
    """Its report says no overhead and its capabilities no estimate: none is counted for it,
    as it admits none itself."""
    old = {"path": "/dev/shm", "free": 1024 * MIB, "promised": 0}
    assert wire.room_in(old) == Room(SHM, 1024 * MIB, 0)
    assert wire.room_out(Room(SHM, 1024 * MIB, 0)) == old  # the disk's room is said as before
    caps = wire.plain(QemuHypervisor("kvm").capabilities)
    del caps["hypervisor_memory_mib"]
    assert wire.capabilities_in(caps).hypervisor_memory_mib == 0
    forged = {**old, "overhead": -(10**9), "hypervisor": "x"}
    assert wire.room_in(forged) == Room(SHM, 1024 * MIB, 0, 0, "x")


@pytest.mark.parametrize("overhead_mib", [320, 64, 0])
def test_placement_reserves_what_the_host_s_admission_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overhead_mib: int
) -> None:
    """Placement read a host's room but reserved a new VM's guest RAM alone: near full it chose a
    host that then refused `host_full`. The host's per-VM overhead, from its report, is reserved
    with the RAM: what placement finds fits the host admits, and what it does not the host
    refuses (under TCG 320 MiB, KVM 64, a host agent from before 0)."""
    host = runtime(tmp_path, monkeypatch, overhead_mib)
    room = {"ram": wire.room_out(host.room(disk=False)[0]), "disk": None}  # no disk asked
    capacity = capacity_of({"cpus": 2, "room": room})
    assert capacity.vm_overhead_mib == overhead_mib
    load = HostLoad(
        *("hst_1", "h1", "eu-1", "up", {}, "qemu", "kvm", ()),
        *(capacity.vcpus, capacity.memory_mib, 1, 0, 0, 0),
        vm_overhead_mib=capacity.vm_overhead_mib,
    )
    fits = 1024 - 2 * overhead_mib  # one VM runs: its hypervisor is promised
    for memory_mib, admitted in ((fits, True), (fits + 1, False)):
        req = Request("eu-1", 1, memory_mib, 0)
        assert eligible(load, req, Policy()) is admitted
        with contextlib.ExitStack() as held:
            if not admitted:
                held.enter_context(pytest.raises(HostFullError))
            held.enter_context(HostRoom(host).held(memory_mib))
