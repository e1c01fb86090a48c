"""What a fleet host that keeps changing costs the control plane (a stand-in link in place of a
real host agent, the watch's rounds run one by one):
- a host that names a new process epoch every round is registered again each time, but told
  the set it should run (a settle: operations written, calls made) once a gap, not every round
  (before, every round); a real restart is told at once;
- a host whose settle fails is told its set again a gap after it began, not every round;
- a host that flaps between lost and back has its computers told so (an event each) once a
  window, not at every flap (before, every flap wrote two events for each of its computers);
  each computer shows `unknown` whenever its host is lost, told or not."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from sanbox.control import host_sets
from sanbox.control.hosts import FleetHosts
from sanbox.control.jobs import Jobs
from sanbox.fleet.hosts import Capacity, HostSpec, LeasePolicy
from sanbox.fleet.link.link import HostUnreachableError
from sanbox.store import Database
from sanbox.store.fleet_models import HostRow, OperationRow
from sanbox.store.models import ComputerRow

from .conftest import add_computer

pytestmark = pytest.mark.fleet
ADDRESS = "h1.internal:7071"
GIB = 1 << 30


class StandIn:
    """A host's link as the watch and a settle use it: its report (a new process epoch at each
    when `restarting`; none while `silent`), and the VMs it is asked to stop."""

    url, server_name, pinned = f"https://{ADDRESS}", None, None

    def __init__(self) -> None:
        self.restarting, self.silent, self.failing = False, False, False
        self.reports, self.kills = 0, 0
        self.reachable = True

    async def refresh(self) -> dict[str, Any]:
        if self.silent:
            raise HostUnreachableError("host h1 does not answer")
        self.reports += 1
        return {
            "epoch": f"agent-{self.reports}" if self.restarting else "agent-0",
            "cpus": 4,
            "room": {
                "ram": {"free": 8 * GIB, "promised": 0},
                "disk": {"free": 100 * GIB, "promised": 0},
            },
            "builds": [],
            "computers": {"cmp_resting": {"liveness": "alive"}},  # recorded stopped: a settle
            "snapshots": [],  # stops its VM
        }

    async def kill(self, computer_id: str) -> None:
        self.kills += 1
        if self.failing:  # not a host's error: the settle fails, and is told again later
            raise RuntimeError("the settle breaks here")

    async def close(self) -> None:
        pass


@asynccontextmanager
async def watching(db: Database, fleet_dir: Path) -> AsyncIterator[tuple[FleetHosts, StandIn]]:
    jobs = Jobs(db, "node-1")
    hosts = FleetHosts(db, fleet_dir, jobs, LeasePolicy(ttl=60.0, lost_after=120.0))
    spec = HostSpec("h1", "eu-1", ADDRESS, Capacity(4, 8192, 100 * GIB), "qemu")
    host_id = hosts.hosts.register(spec).host_id
    add_computer(db, "cmp_resting")
    with db.session() as s:
        s.get_one(ComputerRow, "cmp_resting").host_id = host_id
    stand_in = StandIn()
    hosts.links["h1"] = stand_in  # type: ignore[assignment]
    try:
        yield hosts, stand_in
    finally:
        await hosts.close()
        jobs.close()


async def _round(hosts: FleetHosts) -> None:
    """One round of the watch, and the settles it began run to their end."""
    await hosts.check()
    while not all(task.done() for task in hosts.sets._tasks.values()):
        await asyncio.sleep(0.01)


def _operations(db: Database) -> int:
    with db.session() as s:
        return int(s.scalar(select(func.count()).select_from(OperationRow)) or 0)


def test_a_host_that_restarts_every_round_is_settled_once_a_gap(
    any_db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with watching(any_db, tmp_path / "fleet") as (hosts, h1):
            await _round(hosts)  # first seen: told its set
            assert h1.kills == 1
            h1.restarting = True
            await _round(hosts)  # a real restart: told at once
            assert h1.kills == 2
            for _ in range(10):  # a new epoch every round
                await _round(hosts)
            assert hosts.get("h1").epoch == 12, "its registrations are not held back"
            assert h1.kills == 2, "settled again at every restart"
            assert _operations(any_db) == 2
            h1.restarting = False
            await _round(hosts)  # the restarts stopped: still told only once the gap passed
            assert h1.kills == 2
            monkeypatch.setattr(host_sets, "SETTLE_GAP", 0.0)  # the gap has passed
            await _round(hosts)
            assert h1.kills == 3, "not told its set once the gap passed"
            await _round(hosts)  # told in this epoch: not again
            assert h1.kills == 3

    with caplog.at_level(logging.WARNING, logger="sanbox.control.host_sets"):
        asyncio.run(main())
    held = [r for r in caplog.records if "new process epoch again" in r.getMessage()]
    assert len(held) == 1, "held restarts are said once"


def test_a_host_whose_settle_fails_is_told_again_once_a_gap(
    any_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with watching(any_db, tmp_path / "fleet") as (hosts, h1):
            h1.failing = True
            for _ in range(5):
                await _round(hosts)
            assert h1.kills == 1, "a failed settle was told again every round"
            monkeypatch.setattr(host_sets, "SETTLE_GAP", 0.0)  # the gap has passed
            h1.failing = False
            await _round(hosts)
            assert h1.kills == 2
            await _round(hosts)  # whole now: not again until SETTLE_EVERY
            assert h1.kills == 2

    asyncio.run(main())


def test_a_host_that_flaps_has_its_computers_told_once_a_window(
    any_db: Database, tmp_path: Path
) -> None:
    async def main() -> None:
        async with watching(any_db, tmp_path / "fleet") as (hosts, h1):
            told: list[bool] = []
            hosts.on_change = lambda _id, _name, back: told.append(back)
            host_id = hosts.get("h1").id

            async def lost() -> None:
                h1.silent = True
                with any_db.engine.begin() as conn:  # its lease ran out long ago
                    conn.execute(
                        update(HostRow)
                        .where(HostRow.id == host_id)
                        .values(lease_until=datetime.now(UTC) - timedelta(hours=1))
                    )
                await _round(hosts)
                assert hosts.get("h1").state == "lost"
                await _round(hosts)  # read again: its computers show unknown, told or not
                assert hosts.unknown_reason(host_id) is not None

            async def back() -> None:
                h1.silent = False
                await _round(hosts)
                assert hosts.get("h1").state == "up"
                await _round(hosts)
                assert hosts.unknown_reason(host_id) is None

            await _round(hosts)
            for _ in range(3):  # lost and back, again and again
                await lost()
                await back()
            assert told == [False, True], "its computers were told of every flap"
            await lost()
            hosts.flaps.window = 0.0  # the window has passed, the host still lost: told now
            await _round(hosts)
            assert told == [False, True, False]
            await back()
            assert told == [False, True, False, True]

    asyncio.run(main())
