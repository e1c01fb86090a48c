"""The disk under the data directory, as cgroup v2's io controller names it: the whole disk's
`MAJ:MIN` (the kernel refuses `io.max` on a partition), its I/O scheduler, and whether iocost
weighs it, read from /sys. `cgroup.py` writes a VM's `io.max` for this disk; `sanbox doctor` and
GET /v1/host say what the io controller does here.

There is none to name, said with the reason, for a filesystem without a block device of its own
(tmpfs, overlayfs, btrfs's anonymous device, NFS), for a loop device (its writes reach the real
disk from the loop driver, outside the VM's cgroup) and for a stacked device (device-mapper,
md: the bound would sit above disks it was never measured on). The hypervisor's own throttle
(host/disk_rate.py) bounds the guest there all the same.

    disk_of()   from a device number and a /sys root: pure but for reading that tree
    io_state()  the io controller's effect in words"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

SYS = Path("/sys")


@dataclass(frozen=True)
class BlockDevice:
    dev: str  # MAJ:MIN of the whole disk
    name: str  # its name in /sys/block, e.g. nvme0n1
    scheduler: str | None  # the active I/O scheduler: none, mq-deadline, bfq, kyber
    iocost: bool  # iocost weighs this disk (cgroup v2 root's io.cost.qos: enable=1)


def disk_of(st_dev: int, sys: Path = SYS, cgroup2: Path | None = None) -> BlockDevice | str:
    """The whole disk of the filesystem on `st_dev`, or why there is none to bound."""
    major, minor = os.major(st_dev), os.minor(st_dev)
    if major == 0:
        return "the data dir's filesystem has no block device of its own (tmpfs, overlay, btrfs)"
    try:
        disk = (sys / "dev" / "block" / f"{major}:{minor}").resolve(strict=True)
    except OSError:
        return f"no block device {major}:{minor} in {sys}"
    if (disk / "partition").exists():
        disk = disk.parent
    if (disk / "loop").is_dir():
        return f"the data dir is on a loop device ({disk.name}), outside the VMs' cgroups"
    with contextlib.suppress(OSError):
        if any((disk / "slaves").iterdir()):
            return f"the data dir is on a stacked device ({disk.name}: device-mapper or md)"
    try:
        dev = (disk / "dev").read_text().strip()
    except OSError:
        return f"cannot read {disk / 'dev'}"
    return BlockDevice(dev, disk.name, _scheduler(disk), _iocost(dev, cgroup2))


def _scheduler(disk: Path) -> str | None:
    """The bracketed one of `queue/scheduler` (`[mq-deadline] kyber bfq none`)."""
    try:
        text = (disk / "queue" / "scheduler").read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text.strip() or None


def _iocost(dev: str, cgroup2: Path | None) -> bool:
    if cgroup2 is None:
        return False
    try:
        lines = (cgroup2 / "io.cost.qos").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[:1] == [dev] and "enable=1" in line.split() for line in lines)


def io_state(device: BlockDevice | str, bounded: bool) -> str:
    """What cgroup v2's io controller does for the VMs here: `io.max` on the data dir's disk
    (or why not), and whether their `io.weight` has any effect (only under iocost or BFQ)."""
    if isinstance(device, str):
        return f"cgroup v2: no io.max ({device}); io.weight without effect"
    limit = f"io.max on {device.dev} ({device.name})" if bounded else "no io.max (unbounded)"
    if device.iocost:
        weight = "io.weight under iocost"
    elif device.scheduler == "bfq":
        weight = "io.bfq.weight under BFQ"
    else:
        weight = f"io.weight without effect (scheduler {device.scheduler or 'unknown'}, no iocost)"
    return f"cgroup v2: {limit}; {weight}"
