"""The fleet's placement choice as a pure function: who is eligible, the score (E2B's: the
fullest resource after the request, over capacity with vCPU overcommit), best-of-K sampling."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from sanbox.fleet.hosts import Capacity, HostSpec
from sanbox.fleet.placement import HostLoad, Policy, Request, choose, eligible, score

pytestmark = pytest.mark.unit
GIB = 1 << 30
BASE = HostLoad(
    id="hst_a",
    name="a",
    region="eu-1",
    state="up",
    labels={"kvm": "1"},
    hypervisor="qemu",
    accel="kvm",
    layers=["bld_1"],
    vcpus=8,
    memory_mib=16384,
    disk_bytes=100 * GIB,
    alloc_vcpus=0,
    alloc_memory_mib=0,
    alloc_disk_bytes=0,
)
REQ = Request("eu-1", vcpus=2, memory_mib=4096, disk_bytes=10 * GIB)


def test_the_score_is_the_fullest_resource_after_the_request() -> None:
    policy = Policy()
    assert score(BASE, REQ, policy) == 0.25  # RAM: 4096 / 16384; vCPU 2 / 32; disk 0.1
    busy = replace(BASE, alloc_vcpus=30)
    assert score(busy, REQ, policy) == 1.0  # vCPU: 32 / (8 * 4), still fits
    assert eligible(busy, REQ, policy)
    assert not eligible(replace(BASE, alloc_vcpus=31), REQ, policy)
    assert not eligible(replace(BASE, alloc_memory_mib=12289), REQ, policy)  # RAM: no overcommit
    assert not eligible(replace(BASE, alloc_disk_bytes=91 * GIB), REQ, policy)
    assert score(replace(BASE, memory_mib=0), REQ, policy) == float("inf")


@pytest.mark.parametrize(
    ("change", "request_change"),
    [
        ({"state": "suspect"}, {}),
        ({"state": "draining"}, {}),
        ({"region": "us-1"}, {}),
        ({}, {"labels": {"gpu": "1"}}),
        ({}, {"hypervisor": "firecracker"}),
        ({}, {"accel": "tcg"}),
        ({}, {"layer": "bld_2"}),
        ({"vcpus": 1}, {}),  # wider than the host, though its overcommit would hold it
    ],
)
def test_what_makes_a_host_ineligible(
    change: dict[str, str], request_change: dict[str, object]
) -> None:
    assert eligible(BASE, REQ, Policy())
    host, request = replace(BASE, **change), replace(REQ, **request_change)  # type: ignore[arg-type]
    assert not eligible(host, request, Policy())


def test_best_of_k_samples_k_and_ranks_them() -> None:
    hosts = [
        replace(BASE, id=f"hst_{i}", name=f"h{i}", alloc_memory_mib=1024 * i) for i in range(10)
    ]
    full = replace(BASE, id="hst_full", name="full", alloc_memory_mib=16384)
    picked = choose([*hosts, full], REQ, Policy(k=3), random.Random(3))
    assert len(picked) == 3 and "full" not in [c.name for c in picked]
    assert [c.score for c in picked] == sorted(c.score for c in picked)
    assert choose(hosts, REQ, Policy(k=50), random.Random(3))[0].name == "h0"  # all: the emptiest
    assert choose([full], REQ, Policy(), random.Random(3)) == []


def test_inputs_are_bounded() -> None:
    with pytest.raises(ValueError):
        Request("eu-1", vcpus=-1, memory_mib=1, disk_bytes=1)
    with pytest.raises(ValueError):
        Policy(k=0)
    cap = Capacity(1, 1, 1)
    for bad in ("", "Eu-1", "x" * 33, "eu_1"):
        with pytest.raises(ValueError):
            HostSpec("h1", bad, "https://h1", cap, "qemu")
    with pytest.raises(ValueError):
        HostSpec("h1", "eu-1", "https://h1", cap, "qemu", labels={str(i): "" for i in range(65)})
