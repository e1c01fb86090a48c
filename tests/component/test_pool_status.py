"""A warm pool's status on a real SQLite store: a member counts as ready once its warm-up has run,
not as soon as it runs (a claim of one still warming waits for it; under TCG its warm-up keeps
a core busy). The pool's own refill and warm-up with stand-in guests: test_pool_claims.py; with
real guests: tests/vm/test_pools.py; on joined hosts: test_fleet_pools.py.

On fleet hosts (their rows real, which of them answer this node said by a stand-in): `ready` is
what a claim could take (`pool_claims.claimable`), the rest `unavailable`; the refill discards
members on a draining host, sizes the pool on claimable members (one on a host away is replaced,
up to twice the pool's size in all: a host is away by its lease, not by this node's link) and
trims the extras once that host answers again."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy import update

from sanbox.control import pool_members
from sanbox.control.pools import Pools
from sanbox.fleet.hosts import Capacity, Hosts, HostSpec
from sanbox.store import Database, repo
from sanbox.store.fleet_models import HostRow
from sanbox.store.models import ComputerRow, Org, PoolRow, TemplateRow

from .conftest import clean_pg

pytestmark = pytest.mark.component


@pytest.fixture
def store(tmp_path: Path) -> tuple[Database, Org]:
    database = Database(f"sqlite:///{tmp_path / 'sanbox.db'}")
    database.migrate()
    with database.session() as s:
        org = repo.create_org(s, "default")
        s.add(PoolRow(id="pool_1", org_id=org.id, template="base", size=3))
        for name, state in (("a", "running"), ("b", "running"), ("c", "creating")):
            s.add(
                ComputerRow(
                    id=f"cmp_{name}",
                    org_id=org.id,
                    name=f"member-{name}",
                    template="base",
                    state=state,
                    vcpus=1,
                    memory_mib=512,
                    disk_gib=1,
                    pool="pool_1",
                )
            )
        s.flush()
        s.expunge(org)
    return database, org


def test_a_running_member_still_warming_is_starting_not_ready(store: tuple[Database, Org]) -> None:
    database, org = store
    pools = Pools(cast(Any, SimpleNamespace(db=database, remote=None)))
    [status] = pools.status(org)
    assert (status.ready, status.starting, status.refill) == (2, 1, "filling")
    pools._warming.add("cmp_b")  # made by this node, its warm-up not run yet
    [status] = pools.status(org)
    assert (status.ready, status.starting, status.refill) == (1, 2, "filling")
    pools._warming.discard("cmp_b")
    with database.session() as s:
        member = repo.computer_by_id(s, "cmp_c")
        assert member is not None
        member.state = "running"
    [status] = pools.status(org)
    assert (status.ready, status.starting, status.refill) == (3, 0, "full")


# on fleet hosts ---------------------------------------------------------------------------------


@dataclass
class Answering:
    """The stand-in for this node's links to its hosts: which answer now."""

    hosts: set[str] = field(default_factory=set)

    def answering(self) -> set[str]:
        return set(self.hosts)

    def any_joined(self) -> bool:
        return True


class Refill(Pools):
    """The pool's own refill, with what it makes and discards written down, not done."""

    def __init__(self, fleet: Any) -> None:
        super().__init__(fleet)
        self.made = 0
        self.discarded: dict[str, str] = {}

    async def _make(self, pool: PoolRow) -> None:
        self.made += 1

    async def discard(self, computer_id: str, why: str, pool_id: str) -> None:
        self.discarded[computer_id] = why


@dataclass
class StandInFleet:
    """What of the fleet a pool's status and refill read: the store, the links, a lock each."""

    db: Database
    remote: Answering
    hosts: dict[str, str]  # name -> id

    def lock(self, computer_id: str) -> asyncio.Lock:
        return asyncio.Lock()


@pytest.fixture(params=["sqlite", "postgresql"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[StandInFleet, Org]]:
    """Org `acme` (home eu-1) and hosts `up`, `away` (lost, not answering), `flaky` (suspect
    for a moment, not answering) and `draining`, on each engine in turn (PostgreSQL's skipped
    without SANBOX_TEST_PG_URL)."""
    url = clean_pg() if request.param == "postgresql" else f"sqlite:///{tmp_path / 'sanbox.db'}"
    database = Database(url)
    database.migrate()
    hosts = Hosts(database)
    ids = {}
    for name in ("up", "away", "flaky", "draining"):
        spec = HostSpec(name, "eu-1", "127.0.0.1:1", Capacity(8, 8192, 1 << 34), "local")
        ids[name] = hosts.register(spec).host_id
    hosts.drain("draining")
    with database.engine.begin() as conn:
        conn.execute(update(HostRow).where(HostRow.name == "away").values(state="lost"))
        conn.execute(update(HostRow).where(HostRow.name == "flaky").values(state="suspect"))
    with database.session() as s:
        org = repo.create_org(s, "acme")
        org.home_region = "eu-1"
        s.flush()
        s.expunge(org)
    remote = Answering({ids["up"], ids["draining"]})
    yield StandInFleet(database, remote, ids), org
    database.close()


def _pool(fleet: StandInFleet, org: Org, size: int, *members: tuple[str, str, str]) -> PoolRow:
    """A pool of `size` with these running members (`_add`)."""
    with fleet.db.session() as s:
        pool = PoolRow(id="pool_1", org_id=org.id, template="base", size=size)
        s.add(pool)
        s.flush()
        s.expunge(pool)
    _add(fleet, org, *members)
    return pool


_AGES = itertools.count()  # members are made one after another: the latest is the newest


def _add(
    fleet: StandInFleet,
    org: Org,
    *members: tuple[str, str, str],
    pool: str = "pool_1",
    template: str = "base",
    origins: tuple[str, ...] = (),
) -> None:
    """Running members of `pool` (id, host name, region; made from `origins` in turn, if
    given), each newer than the last."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    with fleet.db.session() as s:
        for i, (cid, host, region) in enumerate(members):
            s.add(
                ComputerRow(
                    id=cid,
                    org_id=org.id,
                    name=f"pool.{cid}",
                    template=template,
                    state="running",
                    vcpus=1,
                    memory_mib=512,
                    disk_gib=1,
                    pool=pool,
                    origin=origins[i] if origins else None,
                    host_id=fleet.hosts[host],
                    region=region,
                    created_at=start + timedelta(seconds=next(_AGES)),
                )
            )


def _refill(pools: Pools, pool: PoolRow) -> bool:
    return asyncio.run(pools.refill(pool))


def _status(pools: Pools, org: Org) -> tuple[int, int, int, str]:
    [status] = pools.status(org)
    return status.ready, status.starting, status.unavailable, status.refill


def test_ready_counts_only_what_a_claim_could_take(fleet: tuple[StandInFleet, Org]) -> None:
    f, org = fleet
    members = [("cmp_a", "up", "eu-1"), ("cmp_b", "away", "eu-1")]
    members += [("cmp_c", "draining", "eu-1"), ("cmp_d", "up", "us-1")]
    _pool(f, org, 3, *members)
    pools = Pools(cast(Any, f))
    [status] = pools.status(org)
    assert status.ready == 1, "members a claim would not take were counted ready"
    assert _status(pools, org) == (1, 0, 3, "filling")
    f.remote.hosts.add(f.hosts["away"])  # answering, but not `up` yet: still not claimable
    assert _status(pools, org)[:3] == (1, 0, 3)
    with f.db.engine.begin() as conn:
        conn.execute(update(HostRow).where(HostRow.name == "away").values(state="up"))
    assert _status(pools, org)[:3] == (2, 0, 2)


def test_the_refill_replaces_members_a_claim_cannot_take(fleet: tuple[StandInFleet, Org]) -> None:
    f, org = fleet
    members = [("cmp_a", "up", "eu-1"), ("cmp_b", "away", "eu-1"), ("cmp_c", "draining", "eu-1")]
    pool = _pool(f, org, 3, *members)
    pools = Refill(f)
    assert _refill(pools, pool)  # one made, still short: another round at once
    assert pools.made == 1
    assert sorted(pools.discarded) == ["cmp_c"], "a member on a draining host was kept"
    assert "draining" in pools.discarded["cmp_c"]


def test_a_pool_stranded_on_a_host_away_is_refilled_then_trimmed_when_it_is_back(
    fleet: tuple[StandInFleet, Org],
) -> None:
    f, org = fleet
    pool = _pool(f, org, 1, ("cmp_a", "away", "eu-1"))
    pools = Refill(f)
    assert not _refill(pools, pool)
    assert (pools.made, pools.discarded) == (1, {}), "the member away was not replaced"
    _add(f, org, ("cmp_b", "up", "eu-1"))  # its replacement, on a host that answers
    pools.made = 0
    assert not _refill(pools, pool)
    assert (pools.made, pools.discarded) == (0, {})
    assert _status(pools, org) == (1, 0, 1, "full")

    # the host is back: the replacement is now an extra, the newest discarded
    f.remote.hosts.add(f.hosts["away"])
    with f.db.engine.begin() as conn:
        conn.execute(update(HostRow).where(HostRow.name == "away").values(state="up"))
    assert _status(pools, org) == (2, 0, 0, "shrinking")
    assert not _refill(pools, pool)
    assert (pools.made, list(pools.discarded)) == (0, ["cmp_b"])


def test_a_member_on_an_up_host_this_node_has_no_report_of_yet_is_not_replaced(
    fleet: tuple[StandInFleet, Org],
) -> None:
    """Not claimable, but not away either: a node that just started has no link yet, and its
    refill must not double every pool for that (the host's lease says whether it is away)."""
    f, org = fleet
    pool = _pool(f, org, 1, ("cmp_a", "up", "eu-1"))
    f.remote.hosts.clear()
    pools = Refill(f)
    assert _status(pools, org)[:3] == (0, 0, 1)
    assert not _refill(pools, pool)
    assert (pools.made, pools.discarded) == (0, {})


def test_members_on_hosts_away_hold_at_most_twice_the_pools_size(
    fleet: tuple[StandInFleet, Org],
) -> None:
    f, org = fleet
    pool = _pool(f, org, 1, ("cmp_a", "away", "eu-1"), ("cmp_b", "away", "eu-1"))
    pools = Refill(f)
    assert not _refill(pools, pool)
    assert (pools.made, pools.discarded) == (0, {}), "a host that comes and goes grew the pool"
    assert _status(pools, org) == (0, 0, 2, "blocked: 2 members wait on hosts that are away")


def test_a_member_on_a_host_suspect_for_a_moment_is_kept_not_replaced(
    fleet: tuple[StandInFleet, Org],
) -> None:
    """A host that misses its lease for a moment is `suspect`: its member is not claimable, but
    the refill replaces only a lost host's (replacing at every dropout made the pool's size in
    restores, and as many deletes once the host was back); the status says what it waits for."""
    f, org = fleet
    pool = _pool(f, org, 1, ("cmp_a", "flaky", "eu-1"))
    pools = Refill(f)
    assert not _refill(pools, pool)
    assert (pools.made, pools.discarded) == (0, {})
    assert _status(pools, org) == (0, 0, 1, "waiting: 1 members on hosts that do not answer now")


def test_a_member_of_an_old_build_is_never_claimable(fleet: tuple[StandInFleet, Org]) -> None:
    """After a rebuild of the org's template, a claim takes only members of its current build:
    the old build's are the refill's to discard (it discarded them, but a claim took them
    meanwhile, and the refill then destroyed the caller's computer)."""
    f, org = fleet
    with f.db.session() as s:
        s.add(
            TemplateRow(
                id="tpl_web",
                org_id=org.id,
                name="web",
                region="eu-1",
                state="ready",
                base="base",
                spec="",
                digest="d",
                snapshot_id="snp_new",
                vcpus=1,
                memory_mib=512,
            )
        )
        pool = PoolRow(id="pool_web", org_id=org.id, template="web", size=2)
        s.add(pool)
        s.flush()
        s.expunge(pool)
    members_ = (("cmp_old", "up", "eu-1"), ("cmp_new", "up", "eu-1"))
    _add(f, org, *members_, pool="pool_web", template="web", origins=("snp_old", "snp_new"))
    members = pool_members.look(cast(Any, f), pool)
    assert members.claimable == {"cmp_new"}
    assert pool_members.discard_why(next(m for m in members.all if m.id == "cmp_old"), members)
