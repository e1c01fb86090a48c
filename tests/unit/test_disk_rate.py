"""Every computer's disk I/O bound (host/disk_rate.py): read from the host's settings, applied by
the hypervisor itself (QEMU's drive throttling, Firecracker's drive rate limiter) and, where
cgroup v2's io controller is present, as `io.max` on the data dir's disk (found in a /sys tree
made here); and what `sanbox doctor` and GET /v1/host say of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sanbox.fleet.link.wire import capabilities_in, plain
from sanbox.host.disk_rate import BURST_SECONDS, UNBOUNDED, DiskRate
from sanbox.host.drivers import VmSpec, VmUser
from sanbox.host.drivers.block_device import BlockDevice, disk_of, io_state
from sanbox.host.drivers.cgroup import io_max, limit_files, limits_for
from sanbox.host.drivers.confine import describe
from sanbox.host.drivers.firecracker.config import FirecrackerPaths, rate_limiter, vm_config
from sanbox.host.drivers.firecracker.driver import capabilities as firecracker_capabilities
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.drivers.qemu import QemuHypervisor
from sanbox.host.drivers.qemu.argv import qemu_argv
from sanbox.host.settings import HostSettings, SettingsError

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def a_spec(tmp: Path, **changes: object) -> VmSpec:
    fields: dict[str, object] = {
        "name": "c1",
        "kernel": tmp / "vmlinux",
        "initrd": tmp / "initrd",
        "disk": tmp / "disk.raw",
        "run_dir": tmp / "run",
        "console_log": tmp / "logs" / "console.log",
    }
    fields.update(changes)
    return VmSpec(**fields)  # type: ignore[arg-type]


def drive_options(spec: VmSpec) -> dict[str, str]:
    argv = qemu_argv(spec, "kvm", 2000.0)
    drive = argv[argv.index("-drive") + 1]
    return dict(o.partition("=")[::2] for o in drive.split(","))


# the settings


def test_the_bound_is_a_host_setting_generous_by_default() -> None:
    default = HostSettings.from_env({})
    assert default.disk_rate == DiskRate(256 * MIB, 8000) == HostSettings().disk_rate
    tuned = HostSettings.from_env({"SANBOX_DISK_MAX_BPS": "104857600", "SANBOX_DISK_MAX_IOPS": "0"})
    assert tuned.disk_rate == DiskRate(100 * MIB, 0)  # 0: that dimension unbounded
    off = HostSettings.from_env({"SANBOX_DISK_MAX_BPS": "0", "SANBOX_DISK_MAX_IOPS": " 0 "})
    assert off.disk_rate == UNBOUNDED and not off.disk_rate.bounded


@pytest.mark.parametrize("value", ["-1", "1e6", "256M", "lots", str(10**13)])
def test_a_bound_that_is_not_a_whole_number_stops_the_host(value: str) -> None:
    with pytest.raises(SettingsError, match="SANBOX_DISK_MAX_IOPS"):
        HostSettings.from_env({"SANBOX_DISK_MAX_IOPS": value})


def test_a_vm_spec_is_bounded_unless_told_otherwise(tmp_path: Path) -> None:
    assert a_spec(tmp_path).disk_rate == DiskRate()  # never unbounded by omission
    assert DiskRate().burst_bps == 2 * DiskRate().bps and BURST_SECONDS == 5
    with pytest.raises(ValueError):
        DiskRate(-1, 0)


# QEMU: the drive's throttle


def test_qemu_throttles_the_root_drive_with_bursts(tmp_path: Path) -> None:
    options = drive_options(a_spec(tmp_path, disk_rate=DiskRate(64 * MIB, 1000)))
    assert {k: v for k, v in options.items() if k.startswith("throttling.")} == {
        "throttling.bps-total": str(64 * MIB),
        "throttling.bps-total-max": str(128 * MIB),
        "throttling.bps-total-max-length": "5",
        "throttling.iops-total": "1000",
        "throttling.iops-total-max": "2000",
        "throttling.iops-total-max-length": "5",
    }
    assert options["werror"] == "stop" and options["rerror"] == "stop"  # the rest unchanged


def test_qemu_leaves_an_unbounded_dimension_out(tmp_path: Path) -> None:
    # QEMU refuses a -max without its sustained rate: an unbounded dimension has neither
    bytes_only = drive_options(a_spec(tmp_path, disk_rate=DiskRate(MIB, 0)))
    assert "throttling.bps-total" in bytes_only
    assert not any(k.startswith("throttling.iops") for k in bytes_only)
    none = drive_options(a_spec(tmp_path, disk_rate=UNBOUNDED))
    assert not any(k.startswith("throttling.") for k in none)


# Firecracker: the drive's rate limiter


def test_firecracker_rate_limits_the_root_drive(tmp_path: Path) -> None:
    spec = a_spec(tmp_path, disk_rate=DiskRate(64 * MIB, 1000))
    (drive,) = vm_config(spec, FirecrackerPaths.direct(spec))["drives"]
    limiter = drive["rate_limiter"]
    assert set(limiter) == {"bandwidth", "ops"}
    for bucket, sustained, burst in (
        (limiter["bandwidth"], 64 * MIB, 128 * MIB),
        (limiter["ops"], 1000, 2000),
    ):
        assert set(bucket) == {"size", "refill_time"}  # TokenBucket's required fields
        assert bucket["size"] * 1000 // bucket["refill_time"] == sustained  # refill rate
        # the bucket's room above one second's worth: QEMU's burst excess over BURST_SECONDS
        assert bucket["size"] - sustained == (burst - sustained) * BURST_SECONDS


def test_firecracker_leaves_out_what_is_unbounded(tmp_path: Path) -> None:
    assert rate_limiter(DiskRate(0, 500)) == {"ops": {"size": 3000, "refill_time": 6000}}
    spec = a_spec(tmp_path, disk_rate=UNBOUNDED)
    (drive,) = vm_config(spec, FirecrackerPaths.direct(spec))["drives"]
    assert "rate_limiter" not in drive


# cgroup v2: io.max on the data dir's disk


def fake_sys(tmp: Path, scheduler: str = "none [mq-deadline] kyber bfq") -> Path:
    """A /sys with sda (8:0, partition sda1 8:1), loop0 (7:0) and dm-0 (253:0) over sda1."""
    sys = tmp / "sys"
    sda = sys / "devices" / "pci0" / "block" / "sda"
    (sda / "sda1").mkdir(parents=True)
    (sda / "dev").write_text("8:0\n")
    (sda / "sda1" / "dev").write_text("8:1\n")
    (sda / "sda1" / "partition").write_text("1\n")
    (sda / "queue").mkdir()
    (sda / "queue" / "scheduler").write_text(scheduler + "\n")
    loop = sys / "devices" / "virtual" / "block" / "loop0"
    (loop / "loop").mkdir(parents=True)
    (loop / "dev").write_text("7:0\n")
    dm = sys / "devices" / "virtual" / "block" / "dm-0"
    (dm / "slaves").mkdir(parents=True)
    (dm / "slaves" / "sda1").symlink_to(sda / "sda1")
    (dm / "dev").write_text("253:0\n")
    links = sys / "dev" / "block"
    links.mkdir(parents=True)
    for name, target in (("8:0", sda), ("8:1", sda / "sda1"), ("7:0", loop), ("253:0", dm)):
        (links / name).symlink_to(target)
    return sys


def test_the_disk_under_a_partition_is_the_whole_disk(tmp_path: Path) -> None:
    cgroup2 = tmp_path / "cgroup"
    cgroup2.mkdir()
    (cgroup2 / "io.cost.qos").write_text("8:0 enable=1 ctrl=auto rpct=0.00 rlat=250000\n")
    disk = disk_of(os.makedev(8, 1), fake_sys(tmp_path), cgroup2)
    assert disk == BlockDevice("8:0", "sda", "mq-deadline", iocost=True)
    no_iocost = disk_of(os.makedev(8, 1), fake_sys(tmp_path / "b"), None)
    assert isinstance(no_iocost, BlockDevice) and not no_iocost.iocost


@pytest.mark.parametrize(
    ("major", "minor", "words"),
    [
        (0, 45, "no block device of its own"),  # tmpfs, overlay, btrfs
        (7, 0, "loop device (loop0)"),
        (253, 0, "stacked device (dm-0"),
        (9, 9, "no block device 9:9"),
    ],
)
def test_no_disk_to_bound_is_said_with_why(
    tmp_path: Path, major: int, minor: int, words: str
) -> None:
    why = disk_of(os.makedev(major, minor), fake_sys(tmp_path))
    assert isinstance(why, str) and words in why


def test_io_max_holds_the_vm_at_the_burst_rates() -> None:
    sda = BlockDevice("8:0", "sda", "none", iocost=False)
    line = io_max(sda, DiskRate(64 * MIB, 1000))
    assert line == f"8:0 rbps={128 * MIB} wbps={128 * MIB} riops=2000 wiops=2000"
    assert io_max(sda, DiskRate(0, 1000)) == "8:0 rbps=max wbps=max riops=2000 wiops=2000"
    assert io_max(sda, UNBOUNDED) is None
    assert io_max("the data dir is on a loop device", DiskRate()) is None
    files = limit_files(limits_for(2, 1024, disk_max=line), "io", 2)
    assert files["io.max"] == line
    assert files["io.weight"] == "default 200" and files["io.bfq.weight"] == "200"
    assert "io.max" not in limit_files(limits_for(2, 1024), "io", 2)


def test_the_io_weight_is_said_to_work_only_under_iocost_or_bfq() -> None:
    said = io_state(BlockDevice("8:0", "sda", "mq-deadline", iocost=False), bounded=True)
    assert "io.max on 8:0 (sda)" in said
    assert "without effect (scheduler mq-deadline, no iocost)" in said
    assert "under iocost" in io_state(BlockDevice("8:0", "sda", "none", iocost=True), True)
    assert "under BFQ" in io_state(BlockDevice("8:0", "sda", "bfq", iocost=False), True)
    assert "no io.max (a reason)" in io_state("a reason", True)


# what the host says


def test_the_host_says_the_bound_and_how_its_driver_holds_it() -> None:
    qemu = QemuHypervisor("kvm").capabilities
    said = describe(qemu, VmUser("sanbox-vm", 990, 990), {}, DiskRate(64 * MIB, 1000))
    assert said["disk_io"] == (
        "64 MiB/s, 1000 IOPS (bursts 128 MiB/s, 2000 IOPS for up to 5 s): "
        "QEMU's drive throttling (reads and writes; not flushes or discards)"
    )
    assert "rate limiter" in str(firecracker_capabilities().disk_rate)
    local = LocalDriver().capabilities
    assert describe(local, None, {}, DiskRate())["disk_io"] == (
        "unbounded: this driver does not throttle its VMs' disks"
    )
    assert str(describe(qemu, None, {}, UNBOUNDED)["disk_io"]).startswith("unbounded (SANBOX")


def test_a_host_agent_that_does_not_say_its_disk_rate_is_heard() -> None:
    caps = plain(QemuHypervisor("kvm").capabilities)
    del caps["disk_rate"]
    assert capabilities_in(caps).disk_rate is None
    assert capabilities_in(plain(QemuHypervisor("kvm").capabilities)).disk_rate is not None
