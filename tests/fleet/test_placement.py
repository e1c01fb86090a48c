"""Placement on PostgreSQL: best-of-K spreads, stays in its region, sends work past a full host,
answers insufficient_capacity rather than spill to another region, never over-commits a host
under concurrent placements, retries another host when one refuses, and keeps a computer's
region and generation."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypedDict, Unpack

import pytest
from sqlalchemy import select

from sanbox.control.errors import NotFoundError
from sanbox.fleet import reservations
from sanbox.fleet.errors import (
    InsufficientCapacityError,
    RegionMismatchError,
    RegionNotAllowedError,
)
from sanbox.fleet.hosts import Capacity, Hosts, HostSpec, Lease
from sanbox.fleet.placement import HostRefused, Placement, Placer, Request
from sanbox.fleet.regions import region_for, set_regions
from sanbox.store import Database
from sanbox.store.fleet_models import HostRow
from sanbox.store.models import ComputerRow

from .conftest import add_computer

pytestmark = pytest.mark.fleet
GIB = 1 << 30


def host(
    db: Database,
    name: str,
    region: str,
    slots: int = 10,
    labels: dict[str, str] | None = None,
    layers: tuple[str, ...] = (),
    accel: str = "kvm",
    vcpus: int = 64,
) -> Lease:
    """A host with room for `slots` computers of `small()`'s size (RAM is what binds)."""
    cap = Capacity(vcpus=vcpus, memory_mib=512 * slots, disk_bytes=1000 * GIB)
    address = f"https://{name}:7443"
    spec = HostSpec(
        name, region, address, cap, "qemu", labels=labels or {}, layers=layers, accel=accel
    )
    return Hosts(db).register(spec)


class Constraints(TypedDict, total=False):
    """What a Request may ask of a host beyond its size."""

    labels: Mapping[str, str]
    hypervisor: str | None
    accel: str | None
    layer: str | None


def small(region: str = "eu-1", **constraints: Unpack[Constraints]) -> Request:
    return Request(region, vcpus=1, memory_mib=512, disk_bytes=GIB, **constraints)


def alloc(db: Database) -> dict[str, int]:
    with db.session() as s:
        rows = s.execute(select(HostRow.name, HostRow.alloc_memory_mib)).all()
    return {name: memory for name, memory in rows}


def test_creates_spread_within_their_region_only(any_db: Database) -> None:
    for name in ("eu-a", "eu-b", "eu-c", "eu-d"):
        host(any_db, name, "eu-1")
    host(any_db, "us-a", "us-1", slots=100)
    placer = Placer(any_db, rng=random.Random(7))
    placed = [placer.place(small()) for _ in range(20)]
    counts = Counter(p.host_name for p in placed)
    assert set(counts) == {"eu-a", "eu-b", "eu-c", "eu-d"}  # all four, none in us-1
    assert max(counts.values()) - min(counts.values()) <= 2  # spread, not stacked
    assert alloc(any_db)["us-a"] == 0
    event = placed[0].event_data()
    assert event["host"] == placed[0].host_name and len(event["candidates"]) == 3
    assert event["candidates"][0] == {"host": event["host"], "score": event["score"]}


def test_a_full_host_sends_the_next_to_the_other(pg: Database) -> None:
    host(pg, "h1", "eu-1", slots=1)
    host(pg, "h2", "eu-1", slots=10)
    placer = Placer(pg)
    Placer(pg).place_on(Hosts(pg).get("h1").id, small())  # h1 is full now
    for _ in range(3):
        p = placer.place(small())
        assert p.host_name == "h2" and [c.name for c in p.candidates] == ["h2"]
    assert alloc(pg) == {"h1": 512, "h2": 3 * 512}


def test_no_room_in_the_region_is_insufficient_capacity_even_with_room_elsewhere(
    any_db: Database,
) -> None:
    host(any_db, "eu-a", "eu-1", slots=2)
    host(any_db, "us-a", "us-1", slots=100)
    placer = Placer(any_db)
    placer.place(small())
    placer.place(small())
    with pytest.raises(InsufficientCapacityError) as full:
        placer.place(small())
    assert (full.value.code, full.value.status) == ("insufficient_capacity", 507)
    with pytest.raises(InsufficientCapacityError):
        placer.place(small(region="ap-1"))  # a region with no host at all
    assert alloc(any_db) == {"eu-a": 1024, "us-a": 0}


def test_concurrent_placements_never_over_commit_a_host(pg: Database) -> None:
    host(pg, "h1", "eu-1", slots=10)
    host(pg, "h2", "eu-1", slots=10)
    placer, threads = Placer(pg), 24
    barrier = threading.Barrier(threads)

    def one(_: int) -> Placement | None:
        barrier.wait()
        try:
            return placer.place(small())
        except InsufficientCapacityError:
            return None

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, range(threads)))
    placed = [r for r in results if r is not None]
    assert len(placed) == 20
    assert Counter(p.host_name for p in placed) == {"h1": 10, "h2": 10}
    assert alloc(pg) == {"h1": 5120, "h2": 5120}


def test_constraints_filter_hosts(any_db: Database) -> None:
    host(any_db, "plain", "eu-1", accel="tcg")
    host(any_db, "gpu", "eu-1", labels={"gpu": "1"}, layers=("bld_py",), accel="kvm")
    placer = Placer(any_db)
    assert placer.place(small(labels={"gpu": "1"})).host_name == "gpu"
    assert placer.place(small(layer="bld_py")).host_name == "gpu"
    assert placer.place(small(accel="tcg")).host_name == "plain"
    with pytest.raises(InsufficientCapacityError):
        placer.place(small(hypervisor="firecracker"))


def test_a_computer_goes_only_to_a_host_at_least_as_wide(any_db: Database) -> None:
    narrow = host(any_db, "narrow", "eu-1", vcpus=2)
    host(any_db, "wide", "eu-1", slots=1, vcpus=8)
    placer = Placer(any_db)
    four = replace(small(), vcpus=4)
    assert placer.place(four).host_name == "wide"  # the narrow one is emptier
    with pytest.raises(InsufficientCapacityError, match="more than host narrow has"):
        placer.place_on(narrow.host_id, four)
    with pytest.raises(InsufficientCapacityError):
        placer.place(replace(small(), vcpus=9))
    assert alloc(any_db) == {"narrow": 0, "wide": 512}


def test_a_reservation_is_given_back_once_by_its_node_or_for_it(any_db: Database) -> None:
    """A node that died between reserving and releasing left the host counting its reservation
    for ever: each is recorded with its node, given back once (a second release does nothing),
    and given back for a node that starts again or held it past any work's length."""
    host(any_db, "h1", "eu-1")
    mine, theirs = Placer(any_db, node="n1"), Placer(any_db, node="n2")
    first, second = mine.place(small()), mine.place(small())
    other = theirs.place(small())
    assert alloc(any_db) == {"h1": 3 * 512}
    mine.release(first)
    mine.release(first)  # again: nothing more is taken off
    assert alloc(any_db) == {"h1": 2 * 512}
    assert reservations.abandon_node(any_db, "n1") == 1  # n1 started again: `second` goes
    assert alloc(any_db) == {"h1": 512}
    mine.release(second)  # its work, had it gone on, gives back nothing twice
    assert alloc(any_db) == {"h1": 512}
    assert reservations.sweep_stale(any_db, older_than=3600) == 0
    assert reservations.sweep_stale(any_db, older_than=-1) == 1  # `other`: held too long
    assert alloc(any_db) == {"h1": 0}
    theirs.release(other)
    assert alloc(any_db) == {"h1": 0}


def test_each_vm_reserves_its_hosts_hypervisor_overhead_and_gives_it_back(
    any_db: Database,
) -> None:
    """A host counts a new VM's hypervisor beside its guest's RAM (320 MiB under TCG, 64 under
    KVM): placement reserved the guest's RAM alone, so near full it chose a host whose own
    admission then refused `host_full`. Each VM reserves its RAM with its host's overhead, as
    the host's reports last said it; a release gives back what was reserved, even when the host
    says another overhead meanwhile; work that starts no VM (a snapshot's move) counts none."""
    cap = Capacity(vcpus=64, memory_mib=1024 + 320, disk_bytes=1000 * GIB, vm_overhead_mib=320)
    tcg = Hosts(any_db).register(HostSpec("tcg", "eu-1", "https://tcg:7443", cap, "qemu"))
    placer = Placer(any_db)
    with pytest.raises(InsufficientCapacityError, match="and its hypervisor's"):
        placer.place(replace(small(), memory_mib=1025))  # fits by its RAM alone
    first = placer.place(replace(small(), memory_mib=1024))
    assert alloc(any_db) == {"tcg": 1024 + 320}
    kvm = Capacity(vcpus=64, memory_mib=4096, disk_bytes=1000 * GIB, vm_overhead_mib=64)
    Hosts(any_db).renew(tcg, kvm)  # its report now: another driver, more room
    second = placer.place_on(tcg.host_id, small())
    assert alloc(any_db) == {"tcg": 1024 + 320 + 512 + 64}
    placer.release(first)  # what it reserved, not what the host says now
    assert alloc(any_db) == {"tcg": 512 + 64}
    carried = placer.place_on(tcg.host_id, replace(small(), vcpus=0, vms=0))
    assert alloc(any_db) == {"tcg": 2 * 512 + 64}
    for done in (second, carried):
        placer.release(done)
    assert alloc(any_db) == {"tcg": 0}
    with any_db.session() as s:
        assert s.scalar(select(HostRow.vm_overhead_mib)) == 64
    before = Capacity(vcpus=64, memory_mib=4096, disk_bytes=1000 * GIB)  # it says none
    Hosts(any_db).renew(tcg, before)
    placer.release(placer.place(replace(small(), memory_mib=4096)))


def test_a_refusing_host_is_released_and_another_tried(pg: Database) -> None:
    for name in ("h1", "h2", "h3", "h4"):
        host(pg, name, "eu-1")
    placer, tried = Placer(pg), []

    def refuse_twice(p: Placement) -> str:
        tried.append(p.host_name)
        if len(tried) < 3:
            raise HostRefused(p.host_name)
        return "created"

    placement, outcome = placer.create(small(), refuse_twice)
    assert outcome == "created" and len(set(tried)) == 3 and placement.host_name == tried[-1]
    assert sorted(alloc(pg).values()) == [0, 0, 0, 512]  # only the one that took it
    placer.release(placement)

    def refuse(p: Placement) -> str:
        raise HostRefused(p.host_name)

    with pytest.raises(InsufficientCapacityError, match="3 hosts"):
        placer.create(small(), refuse)
    assert set(alloc(pg).values()) == {0}


def test_a_computer_keeps_its_region_and_each_placement_is_a_new_generation(
    any_db: Database,
) -> None:
    eu = host(any_db, "eu-a", "eu-1")
    us = host(any_db, "us-a", "us-1")
    add_computer(any_db, "cmp_x")
    placer = Placer(any_db)
    first = placer.place(small(), computer_id="cmp_x")
    assert (first.host_id, first.generation) == (eu.host_id, 1)
    placer.release(first)  # stopped
    again = placer.place_on(eu.host_id, small(), computer_id="cmp_x")  # started where its disk is
    assert again.generation == 2
    before = alloc(any_db)
    with pytest.raises(RegionMismatchError) as crossing:  # a fork or restore into us-1
        placer.place_on(us.host_id, small(region="eu-1"), computer_id="cmp_x")
    assert crossing.value.code == "region_mismatch"
    with pytest.raises(RegionMismatchError):
        placer.place(small(region="us-1"), computer_id="cmp_x")
    with pytest.raises(NotFoundError):
        placer.place(small(), computer_id="cmp_none")
    assert alloc(any_db) == before  # nothing was written
    with any_db.session() as s:
        row = s.get_one(ComputerRow, "cmp_x")
    assert (row.region, row.host_id, row.generation) == ("eu-1", eu.host_id, 2)


def test_an_orgs_regions(any_db: Database) -> None:
    assert region_for(any_db, "org_a", None) is None  # no regions: one host, anywhere
    set_regions(any_db, "org_a", "eu-1", ["eu-2", "eu-1"])
    assert region_for(any_db, "org_a", None) == "eu-1"
    assert region_for(any_db, "org_a", "eu-2") == "eu-2"
    with pytest.raises(RegionNotAllowedError) as refused:
        region_for(any_db, "org_a", "us-1")
    assert (refused.value.code, refused.value.status) == ("region_not_allowed", 403)
