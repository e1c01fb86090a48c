"""Each VM in a cgroup of its own: `sanbox.slice/<data-dir tag>-<computer id>`, with a CPU quota of
its vCPUs, a memory ceiling of its RAM plus QEMU's overhead, a pids ceiling, an IO weight from
its size and, on cgroup v2, `io.max` on the data dir's disk (block_device.py) at the burst rates
of the host's disk bound (host/disk_rate.py): the hypervisor throttles the guest's reads and
writes itself, and `io.max` also holds what it does not count (flushes' writeback, discards
punched into the disk file, qcow2 metadata). The IO weight does something only where iocost or
BFQ weighs the disk (`block_device.io_state` says which). The launcher joins the cgroups before
QEMU starts, so nothing it allocates escapes them (guest RAM is shmem, charged to the cgroup that
first touches it: QEMU, inside).

Controllers are taken from cgroup v2 where it has them; on a hybrid host (v2 mounted beside v1
hierarchies, as on these build machines) a controller bound to a v1 hierarchy is used there.
A controller available in neither is missing: `Cgroups.missing` says so and VMs run without it.

    limits_for() and limit_files()   pure: what to write, unit-tested
    plan()                           pure: which hierarchy serves each controller
    Cgroups                          the side effects: detect, create, remove, list
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..disk_rate import DiskRate
from ..errors import HostError
from .block_device import BlockDevice, disk_of, io_state
from .driver import Capabilities, VmSpec

log = logging.getLogger(__name__)

CONTROLLERS = ("cpu", "memory", "pids", "io")
V1_NAME = {"cpu": "cpu", "memory": "memory", "pids": "pids", "io": "blkio"}
SLICE = "sanbox.slice"
PERIOD_US = 100_000
PIDS_MAX = 256
OVERHEAD_MIB = 256  # QEMU itself: its heap and device emulation
MIB = 1024 * 1024


class CgroupError(HostError):
    code = "cgroup_error"


@dataclass(frozen=True)
class Limits:
    cpu_quota_us: int
    cpu_period_us: int
    memory_bytes: int
    pids: int
    io_weight: int  # 1..10000, 100 is the kernel's default
    io_max: str | None = None  # cgroup v2's io.max line for the data dir's disk; None: not set


def io_max(disk: BlockDevice | str, rate: DiskRate) -> str | None:
    """The `io.max` line for `disk` (reads and writes each at the burst rates; `max`: a dimension
    without bound), or None when there is no disk to name or no bound. Pure."""
    if isinstance(disk, str) or not rate.bounded:
        return None
    bps = str(rate.burst_bps) if rate.bps else "max"
    iops = str(rate.burst_iops) if rate.iops else "max"
    return f"{disk.dev} rbps={bps} wbps={bps} riops={iops} wiops={iops}"


def limits_for(
    vcpus: int, memory_mib: int, extra_mib: int = 0, disk_max: str | None = None
) -> Limits:
    """A VM's limits from its size: its vCPUs' worth of CPU time, its RAM + 256 MiB + 10%, plus
    what its hypervisor says it holds beyond that (`extra_mib`: TCG's code cache); `disk_max`:
    its `io.max` line (`io_max`)."""
    return Limits(
        cpu_quota_us=vcpus * PERIOD_US,
        cpu_period_us=PERIOD_US,
        memory_bytes=(memory_mib + OVERHEAD_MIB + memory_mib // 10 + extra_mib) * MIB,
        pids=PIDS_MAX,
        io_weight=max(1, min(10_000, 100 * vcpus)),
        io_max=disk_max,
    )


def limit_files(limits: Limits, controller: str, version: int) -> dict[str, str]:
    """The files to write (in order) to set `controller`'s limit in a cgroup of `version`."""
    if version == 2:
        return {
            "cpu": {"cpu.max": f"{limits.cpu_quota_us} {limits.cpu_period_us}"},
            "memory": {"memory.max": str(limits.memory_bytes)},
            "pids": {"pids.max": str(limits.pids)},
            "io": {
                "io.weight": f"default {limits.io_weight}",  # iocost's
                "io.bfq.weight": str(max(1, min(1000, limits.io_weight))),  # BFQ's, if loaded
                **({"io.max": limits.io_max} if limits.io_max else {}),
            },
        }[controller]
    return {
        "cpu": {
            "cpu.cfs_period_us": str(limits.cpu_period_us),
            "cpu.cfs_quota_us": str(limits.cpu_quota_us),
        },
        "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)},
        "pids": {"pids.max": str(limits.pids)},
        "io": {"blkio.bfq.weight": str(max(1, min(1000, limits.io_weight)))},
    }[controller]


@dataclass(frozen=True)
class Mount:
    path: Path
    fstype: str  # cgroup2 or cgroup
    options: frozenset[str]  # super options: a v1 hierarchy's controllers are among them


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        path = Path(fields[4].replace("\\040", " "))
        mounts.append(Mount(path, tail[0], frozenset(tail[2].split(","))))
    return mounts


@dataclass(frozen=True)
class Hierarchy:
    version: int
    root: Path  # where it is mounted


def plan(
    mounts: list[Mount], v2_controllers: set[str]
) -> tuple[dict[str, Hierarchy], dict[str, str]]:
    """Which hierarchy serves each controller, and why the others are missing. Pure."""
    v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
    placed: dict[str, Hierarchy] = {}
    missing: dict[str, str] = {}
    for controller in CONTROLLERS:
        v1 = next(
            (m for m in mounts if m.fstype == "cgroup" and V1_NAME[controller] in m.options), None
        )
        if v2 is not None and controller in v2_controllers:
            placed[controller] = Hierarchy(2, v2.path)
        elif v1 is not None and controller != "io":
            placed[controller] = Hierarchy(1, v1.path)
        elif v1 is not None:
            missing[controller] = "bound to a cgroup v1 blkio hierarchy (no weights there)"
        elif v2 is None:
            missing[controller] = "no cgroup2 filesystem is mounted"
        else:
            missing[controller] = f"not enabled in cgroup v2 at {v2.path}"
    return placed, missing


@dataclass
class Cgroups:
    """The VM cgroups of this host (one data dir's VMs are named `<tag>-<computer id>`)."""

    placed: dict[str, Hierarchy]
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def detect(cls) -> Cgroups:
        try:
            mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        except OSError:
            return cls({}, {c: "cannot read /proc/self/mountinfo" for c in CONTROLLERS})
        v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
        available: set[str] = set()
        if v2 is not None:
            with contextlib.suppress(OSError):
                available = set((v2.path / "cgroup.controllers").read_text().split())
        placed, missing = plan(mounts, available)
        return cls(placed, missing)

    def disk(self, path: Path) -> BlockDevice | str:
        """The disk under `path` as the io controller names it, or why there is none."""
        io = self.placed.get("io")
        if io is None or io.version != 2:
            return "no cgroup v2 io controller"
        try:
            st_dev = path.stat().st_dev
        except OSError as exc:
            return f"cannot stat {path}: {exc.strerror}"
        return disk_of(st_dev, cgroup2=io.root)

    def limits(self, spec: VmSpec, caps: Capabilities) -> Limits:
        """A VM's limits (`limits_for`, with what its driver holds beyond its RAM), and its
        `io.max` for the disk its disk file is on."""
        disk_max = io_max(self.disk(spec.disk), spec.disk_rate)
        return limits_for(spec.vcpus, spec.memory_mib, caps.memory_overhead_mib, disk_max)

    def describe(
        self, data_dir: Path | None = None, rate: DiskRate | None = None
    ) -> dict[str, str]:
        """controller -> `cgroup v2`, `cgroup v1`, or `missing: why`; io on cgroup v2 says what
        it does for the disk under `data_dir` (`block_device.io_state`), when given."""
        out = {c: f"cgroup v{h.version}" for c, h in self.placed.items()}
        out.update({c: f"missing: {why}" for c, why in self.missing.items()})
        io = self.placed.get("io")
        if data_dir is not None and io is not None and io.version == 2:
            out["io"] = io_state(self.disk(data_dir), rate is not None and rate.bounded)
        return {c: out[c] for c in CONTROLLERS}

    def _dirs(self, name: str) -> dict[Path, tuple[int, list[str]]]:
        """Each distinct cgroup directory of `name`, its version and the controllers it holds."""
        dirs: dict[Path, tuple[int, list[str]]] = {}
        for controller, h in self.placed.items():
            d = h.root / SLICE / name
            dirs.setdefault(d, (h.version, []))[1].append(controller)
        return dirs

    def _enable_v2(self, root: Path, controllers: list[str]) -> None:
        """Let the slice and its children use `controllers` (cgroup.subtree_control)."""
        want = " ".join(f"+{c}" for c in controllers)
        for parent in (root, root / SLICE):
            have = set((parent / "cgroup.subtree_control").read_text().split())
            if not set(controllers) <= have:
                (parent / "cgroup.subtree_control").write_text(want)

    def create(self, name: str, limits: Limits) -> tuple[Path, ...]:
        """The VM's cgroups with their limits; returns the cgroup.procs files to join."""
        procs = []
        try:
            for d, (version, controllers) in self._dirs(name).items():
                (d.parent).mkdir(exist_ok=True)
                if version == 2:
                    self._enable_v2(d.parent.parent, controllers)
                d.mkdir(exist_ok=True)
                for controller in controllers:
                    for file, value in limit_files(limits, controller, version).items():
                        self._write(d / file, value, required=controller != "io")
                procs.append(d / "cgroup.procs")
        except OSError as exc:
            self.remove(name)
            raise CgroupError(f"cannot set up the VM's cgroup {name}: {exc}") from exc
        return tuple(procs)

    @staticmethod
    def _write(path: Path, value: str, required: bool) -> None:
        try:
            path.write_text(value)
        except OSError:
            if required:
                raise
            log.info("cgroup limit %s not set (not supported here)", path.name)

    def remove(self, name: str, timeout: float = 5.0) -> None:
        """Remove the VM's cgroups (waiting briefly while its last processes finish exiting)."""
        for d in self._dirs(name):
            deadline = time.monotonic() + timeout
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.warning("cgroup %s not removed: %s", d, exc)
                        break
                    time.sleep(0.02)

    def names(self, prefix: str) -> list[str]:
        """The VM cgroups whose names start with `prefix` (for the orphan sweep)."""
        found: set[str] = set()
        for h in self.placed.values():
            with_slice = h.root / SLICE
            if with_slice.is_dir():
                found.update(
                    n
                    for n in os.listdir(with_slice)
                    if n.startswith(prefix) and (with_slice / n).is_dir()
                )
        return sorted(found)

    def procs(self, name: str) -> list[int]:
        pids: set[int] = set()
        for d in self._dirs(name):
            try:
                pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except OSError:
                continue
        return sorted(pids)

    def cpu_usec(self, name: str) -> int | None:
        """CPU time the VM's cgroup has used, in µs: cgroup v2's `cpu.stat` `usage_usec`, v1's
        `cpuacct.usage` where cpuacct shares the cpu hierarchy, else the user + system time of
        the processes in it (`/proc/PID/stat`). None when it has no cgroup here (unmeasured)."""
        for d, (version, _controllers) in self._dirs(name).items():
            with contextlib.suppress(OSError, ValueError):
                if version == 2:
                    for line in (d / "cpu.stat").read_text().splitlines():
                        if line.startswith("usage_usec "):
                            return int(line.split()[1])
                elif (d / "cpuacct.usage").exists():
                    return int((d / "cpuacct.usage").read_text()) // 1000
        pids = self.procs(name)
        if not pids:
            return None
        ticks = 0
        for pid in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks * 1_000_000 // os.sysconf("SC_CLK_TCK")
