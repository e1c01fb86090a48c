"""A warm pool's status on a real SQLite store: a member counts as ready once its warm-up has run,
not as soon as it runs (a claim of one still warming waits for it; under TCG its warm-up keeps
a core busy). The pool's own refill and warm-up with stand-in guests: test_pool_claims.py; with
real guests: tests/vm/test_pools.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sanbox.control.pools import Pools
from sanbox.store import Database, repo
from sanbox.store.models import ComputerRow, Org, PoolRow

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
    pools = Pools(cast(Any, SimpleNamespace(db=database)))
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
