"""Hosts on the database's clock: two register, renew, one falls silent and is declared suspect
then lost by the sweep (short lease times, polled); it registers again with a new epoch, and the
old epoch's renewal and reports are refused."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from sanbox.fleet.errors import (
    HostLostError,
    HostStateError,
    RegionMismatchError,
    StaleGenerationError,
)
from sanbox.fleet.hosts import Capacity, Hosts, HostSpec, LeasePolicy, Swept
from sanbox.store import Database
from sanbox.store.models import ComputerRow

from .conftest import add_computer, wait_for

pytestmark = pytest.mark.fleet
CAP = Capacity(vcpus=4, memory_mib=8192, disk_bytes=100 << 30)


def spec(name: str, region: str = "eu-1") -> HostSpec:
    return HostSpec(name, region, f"https://{name}.internal:7443", CAP, "qemu", labels={"kvm": "1"})


def test_a_silent_host_is_suspect_then_lost_and_rejoins_with_a_new_epoch(pg: Database) -> None:
    # h1 renews each round, h2 never: leases long enough for a loaded machine to keep h1 up, and
    # a gap between suspect and lost wider than a stall of one (a round 1.5 s late once went
    # straight from up to lost, which is right for the product and not what this test shows)
    hosts = Hosts(pg, LeasePolicy(ttl=2.0, lost_after=8.0))
    h1, h2 = hosts.register(spec("h1")), hosts.register(spec("h2"))
    assert (h1.epoch, h2.epoch) == (1, 1) and h1.host_id != h2.host_id
    renewed = hosts.renew(h1)
    assert renewed.until > h1.until  # on the database's clock
    add_computer(pg, "cmp_on_h2")
    with pg.session() as s:
        s.get_one(ComputerRow, "cmp_on_h2").host_id = h2.host_id

    def h2_is(state: str) -> bool:
        hosts.renew(h1)  # h1 keeps renewing; h2 has stopped
        swept = hosts.sweep()
        assert "h1" not in swept.suspect + swept.lost
        seen.append(swept)
        return hosts.get("h2").state == state

    seen: list[Swept] = []
    wait_for(lambda: h2_is("suspect"), timeout=30)
    wait_for(lambda: h2_is("lost"), timeout=30)
    assert hosts.get("h1").state == "up"
    # each transition is reported once, the lost host's computers with it
    assert sum(s.suspect.count("h2") for s in seen) == 1
    lost = [s for s in seen if s.lost]
    assert [(s.lost, s.unknown) for s in lost] == [(["h2"], ["cmp_on_h2"])]

    with pytest.raises(HostLostError) as refused:
        hosts.renew(h2)
    assert refused.value.code == "host_lost"
    again = hosts.register(spec("h2"))
    assert (again.host_id, again.epoch) == (h2.host_id, 2)
    assert hosts.get("h2").state == "up"
    hosts.renew(again)
    with pytest.raises(HostLostError):  # the old epoch stays refused though the host is up
        hosts.renew(h2)


def test_concurrent_registrations_each_take_an_epoch_of_their_own(pg: Database) -> None:
    hosts, threads = Hosts(pg), 6
    barrier = threading.Barrier(threads)

    def register(_: int) -> int:
        barrier.wait()
        return hosts.register(spec("h1")).epoch

    with ThreadPoolExecutor(threads) as pool:
        epochs = sorted(pool.map(register, range(threads)))
    assert epochs == list(range(1, threads + 1))
    assert hosts.get("h1").epoch == threads


def test_a_silent_suspect_host_renewing_in_time_is_up_again(any_db: Database) -> None:
    hosts = Hosts(any_db, LeasePolicy(ttl=0.2, lost_after=30))
    lease = hosts.register(spec("h1"))
    wait_for(lambda: "h1" in hosts.sweep().suspect)
    hosts.renew(lease)
    assert hosts.get("h1").state == "up"


def test_reports_count_only_for_the_generation_and_epoch_held(any_db: Database) -> None:
    hosts = Hosts(any_db)
    lease = hosts.register(spec("h1"))
    add_computer(any_db, "cmp_a")
    with any_db.session() as s:
        row = s.get_one(ComputerRow, "cmp_a")
        row.host_id, row.generation = lease.host_id, 3
    hosts.report(lease, "cmp_a", 3, state="running")
    with pytest.raises(StaleGenerationError):  # a zombie of an older placement
        hosts.report(lease, "cmp_a", 2, state="stopped")
    new = hosts.register(spec("h1"))
    with pytest.raises(StaleGenerationError):  # the host's previous life
        hosts.report(lease, "cmp_a", 3, state="stopped")
    hosts.report(new, "cmp_a", 3, state="paused")
    with any_db.session() as s:
        assert s.scalar(select(ComputerRow.state).where(ComputerRow.id == "cmp_a")) == "paused"


def test_drain_forget_and_a_region_a_host_cannot_change(any_db: Database) -> None:
    hosts = Hosts(any_db, LeasePolicy(ttl=0.1, lost_after=0.2))
    hosts.register(spec("h1"))
    with pytest.raises(RegionMismatchError):
        hosts.register(spec("h1", region="us-1"))
    hosts.drain("h1")
    assert hosts.get("h1").state == "draining"
    lease = hosts.register(spec("h1"))  # a draining host stays draining
    assert (lease.epoch, hosts.get("h1").state) == (2, "draining")
    with pytest.raises(HostStateError):
        hosts.forget("h1")  # not lost
    wait_for(lambda: "h1" in hosts.sweep().lost)
    add_computer(any_db, "cmp_b")
    with any_db.session() as s:
        s.get_one(ComputerRow, "cmp_b").host_id = lease.host_id
    assert hosts.forget("h1") == ["cmp_b"]
    assert hosts.get("h1").state == "retired"
    with pytest.raises(HostLostError):
        hosts.renew(lease)
