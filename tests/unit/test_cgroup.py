"""Cgroup limits from a computer's size, and which hierarchy serves each controller (pure v2,
a hybrid host with v1 hierarchies beside an empty v2, or nothing)."""

from pathlib import Path

import pytest

from sanbox.host.drivers.cgroup import Hierarchy, limit_files, limits_for, parse_mountinfo, plan

pytestmark = pytest.mark.unit

MIB = 1024**2

HYBRID = """\
25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
28 25 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
29 25 0:26 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio
30 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
31 1 8:1 / / rw - ext4 /dev/vda rw
"""
UNIFIED = "29 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    ("vcpus", "memory_mib", "cpu_max", "memory_max", "io_weight"),
    [
        (1, 512, "100000 100000", (512 + 256 + 51) * MIB, "default 100"),
        (2, 1024, "200000 100000", (1024 + 256 + 102) * MIB, "default 200"),
        (4, 8192, "400000 100000", (8192 + 256 + 819) * MIB, "default 400"),
    ],
)
def test_limits_follow_the_computers_size(
    vcpus: int, memory_mib: int, cpu_max: str, memory_max: int, io_weight: str
) -> None:
    limits = limits_for(vcpus, memory_mib)
    assert limit_files(limits, "cpu", 2) == {"cpu.max": cpu_max}
    assert limit_files(limits, "memory", 2) == {"memory.max": str(memory_max)}
    assert limit_files(limits, "pids", 2) == {"pids.max": "256"}
    assert limit_files(limits, "io", 2)["io.weight"] == io_weight
    assert memory_max > memory_mib * MIB  # guest RAM (shmem, charged here) plus QEMU itself


def test_v1_files_set_the_same_limits_period_first() -> None:
    limits = limits_for(2, 1024)
    cpu = limit_files(limits, "cpu", 1)
    assert list(cpu) == ["cpu.cfs_period_us", "cpu.cfs_quota_us"]  # a quota needs its period
    assert cpu["cpu.cfs_quota_us"] == "200000"
    assert limit_files(limits, "memory", 1) == {"memory.limit_in_bytes": str(limits.memory_bytes)}


def test_a_hybrid_host_uses_its_v1_hierarchies_and_says_io_is_missing() -> None:
    placed, missing = plan(parse_mountinfo(HYBRID), v2_controllers={"hugetlb"})
    assert placed == {
        "cpu": Hierarchy(1, Path("/sys/fs/cgroup/cpu")),
        "memory": Hierarchy(1, Path("/sys/fs/cgroup/memory")),
        "pids": Hierarchy(1, Path("/sys/fs/cgroup/pids")),
    }
    assert set(missing) == {"io"}


def test_a_unified_host_uses_v2_for_what_it_has() -> None:
    placed, missing = plan(parse_mountinfo(UNIFIED), v2_controllers={"cpu", "memory", "pids"})
    assert {c: h.version for c, h in placed.items()} == {"cpu": 2, "memory": 2, "pids": 2}
    assert "not enabled in cgroup v2" in missing["io"]


def test_no_cgroups_at_all_is_said_not_pretended() -> None:
    placed, missing = plan([], v2_controllers=set())
    assert placed == {}
    assert set(missing) == {"cpu", "memory", "pids", "io"}
