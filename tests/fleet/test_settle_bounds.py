"""A host told the set it should run acts on what it reports, and a compromised host may report
anything: ids no record names write nothing to the records (no computer, no snapshot, no
operation), ids of no shape an id has are passed over, and one settle acts on at most
`MOST_STEPS` items, what the records name first, the rest left for its next settle (before,
every id a host listed began an operation and a call, settle after settle)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from sanbox.control import host_sets
from sanbox.control.host_sets import HostSets
from sanbox.store import Database
from sanbox.store.fleet_models import OperationRow
from sanbox.store.models import ComputerRow, SnapshotRow

from .conftest import add_computer

pytestmark = pytest.mark.fleet
CAP = 8  # the bound, small here: what a settle may act on


class ListingHost:
    """A host's link as a settle uses it: each call it is asked, and an answer for each."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def kill(self, computer_id: str) -> None:
        self.calls.append(("kill", computer_id))

    async def quarantine(self, computer_id: str) -> str:
        self.calls.append(("quarantine", computer_id))
        return f"/quarantine/{computer_id}"

    async def delete_snapshot(self, snapshot_id: str) -> None:
        self.calls.append(("delete_snapshot", snapshot_id))


def _placed(db: Database, computer_id: str, host_id: str, state: str) -> None:
    add_computer(db, computer_id)
    with db.session() as s:
        row = s.get(ComputerRow, computer_id)
        assert row is not None
        row.host_id, row.state = host_id, state


def _count(db: Database, table: Any) -> int:
    with db.session() as s:
        return int(s.scalar(select(func.count()).select_from(table)) or 0)


def test_a_host_listing_made_up_ids_writes_no_records_and_a_settle_is_bounded(
    any_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_sets, "MOST_STEPS", CAP, raising=False)
    with any_db.engine.begin() as conn:
        conn.execute(delete(SnapshotRow))
    _placed(any_db, "cmp_resting", "hst_1", "stopped")  # its VM still runs there
    _placed(any_db, "cmp_elsewhere", "hst_2", "running")  # the first copy of a move
    made_up = {f"cmp_madeup{n:04d}": {"liveness": "dead"} for n in range(3 * CAP)}
    report = {
        "epoch": "e1",
        "computers": {
            # "zz" sorts last: what the records name goes first whatever its name
            "zz_resting": {"liveness": "alive"},
            **made_up,
            "cmp_resting": {"liveness": "alive"},
            "cmp_elsewhere": {"liveness": "dead"},
            "../../etc": {"liveness": "dead"},
            "cmp_" + "a" * 60: {"liveness": "dead"},  # longer than any record's id
            "x" * 200: {"liveness": "dead"},
        },
        "snapshots": [f"snp_madeup{n:04d}" for n in range(3 * CAP)]
        + ["snp_../x", "snp_" + "a" * 90],
    }
    host = ListingHost()
    sets = HostSets(any_db, "node-1")
    row = SimpleNamespace(id="hst_1", name="h1")
    for _ in range(3):  # settle after settle: each bounded
        host.calls.clear()
        asyncio.run(sets.settle(row, host, report))  # type: ignore[arg-type]
        assert len(host.calls) == CAP, host.calls
        assert host.calls[:2] == [("kill", "cmp_resting"), ("quarantine", "cmp_elsewhere")]
        assert all(
            name != "../../etc" and len(name) <= 64 and "/" not in name for _, name in host.calls
        )
    assert _count(any_db, ComputerRow) == 2 and _count(any_db, SnapshotRow) == 0
    with any_db.session() as s:  # the two the records name, each settle; none for made-up ids
        held = set(s.scalars(select(OperationRow.computer_id)))
    assert held == {"cmp_resting", "cmp_elsewhere"}
