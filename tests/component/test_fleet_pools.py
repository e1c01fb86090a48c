"""Warm pools on fleet hosts (real host agents over mutual TLS, on the local driver):
- a claim never takes a member whose host is away: the create is made the ordinary way (here
  refused: no host is up), nothing of it is left under the caller's name, a retry with the same
  Idempotency-Key is no success either, and the member waits in its pool until its host is back;
- a claim takes members of the region the create would run in now: after the org's home region
  moved, a create is not served by a member of the old one, and the refill replaces the members
  of the old region with members of the new;
- a drain empties its host of pool members: they are not claimable (a claimed computer would
  have to move), so the refill discards them at once and makes their replacements on a host that
  takes new computers;
- a pool whose member is stranded on a host that is away counts it `unavailable`, not `ready`,
  and gets a replacement; once the host is back, the extra member is trimmed.
(A claim on these stand-in hosts ends in the ordinary create: they run no egress gateway, so a
claim's policy fails there. Which member a claim would take is what `ready` counts, by the same
rule: test_pool_status.py.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from sanbox import Sanbox
from sanbox.store import Database
from sanbox.store.db import sqlite_url
from sanbox.store.fleet_models import HostRow
from sanbox.store.models import ComputerRow, EventRow

from .conftest import LiveServer
from .fleet_hosts import served_host
from .test_host_link import (
    _free_port,
    _hosts,
    _until,
    serving_fleet,
)

pytestmark = pytest.mark.component


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=3.0, lost_after=60.0)


def _call(live: LiveServer, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {live.key}", **kw.pop("headers", {})}
    return httpx.request(method, f"{live.url}{path}", headers=headers, timeout=60, **kw)


def _pool_ready(live: LiveServer, size: int) -> None:
    r = _call(live, "PUT", "/v1/pools/base", json={"size": size})
    assert r.status_code == 200, r.text
    _until(
        "the pool ready",
        lambda: _call(live, "GET", "/v1/pools").json()["pools"][0]["ready"] >= size,
        timeout=60,
    )


def _members(live: LiveServer) -> list[dict[str, Any]]:
    """The pool's members as the database holds them (hidden from every listing)."""
    q = select(ComputerRow.id, ComputerRow.state, ComputerRow.region, HostRow.name)
    q = q.outerjoin(HostRow, HostRow.id == ComputerRow.host_id)
    rows = _read(live, q.where(ComputerRow.pool.is_not(None)).order_by(ComputerRow.created_at))
    return [{"id": r.id, "state": r.state, "region": r.region, "host": r.name} for r in rows]


def _said(live: LiveServer, computer_id: str) -> list[str]:
    """What the events of a computer (a member's too, once it is gone) say, in order."""
    q = select(EventRow.message).where(EventRow.computer_id == computer_id)
    return [r.message for r in _read(live, q.order_by(EventRow.id))]


def _read(live: LiveServer, q: Any) -> list[Any]:
    db = Database(sqlite_url(live.data_dir.root / "sanbox.db"))
    try:
        with db.engine.begin() as conn:
            return list(conn.execute(q).all())
    finally:
        db.close()


def _claimed(live: LiveServer, computer_id: str) -> bool:
    events = _call(live, "GET", f"/v1/computers/{computer_id}/events").json()["events"]
    return any(e["data"].get("start") == "claimed" for e in events)


def test_a_claim_never_takes_a_member_whose_host_is_away(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    host_dir, port = short_tmp / "h1", _free_port()
    with served_host(live, host_dir, port, "h1", "eu-1") as stop:
        _pool_ready(live, 1)
        [member] = _members(live)
        stop.set()  # the host agent goes; its member's VM runs on
        _until("h1 suspect", lambda: _hosts(live)[0].state == "suspect", timeout=30)
    body = {"template": "base", "name": "c1"}
    key = {"Idempotency-Key": "away-1"}
    first = _call(live, "POST", "/v1/computers", json=body, headers=key)
    assert first.status_code >= 400, first.text  # no host is up: made nowhere
    assert _call(live, "GET", "/v1/computers").json()["computers"] == []
    again = _call(live, "POST", "/v1/computers", json=body, headers=key)
    assert again.status_code >= 400, again.text
    assert _call(live, "GET", "/v1/computers").json()["computers"] == []
    assert _members(live) == [member], "the member left its pool"

    # back: a create is served (the stand-in host runs no egress gateway, so a claim's policy
    # fails there and the member is discarded: the create is then made the ordinary way)
    with served_host(live, host_dir, port, "h1", "eu-1"):
        made = _call(live, "POST", "/v1/computers", json=body, headers=key)
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "running"
        listed = _call(live, "GET", "/v1/computers").json()["computers"]
        assert [(c["id"], c["name"]) for c in listed] == [(made.json()["id"], "c1")]
        assert member["id"] not in [m["id"] for m in _members(live) if m["state"] != "running"]
        _call(live, "PUT", "/v1/pools/base", json={"size": 0})
        assert _call(live, "DELETE", f"/v1/computers/{made.json()['id']}").status_code < 300
        _until("no member left", lambda: _members(live) == [], timeout=30)


def test_a_claim_takes_a_member_of_the_region_the_create_would_run_in(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    eu, us = (short_tmp / "eu", _free_port()), (short_tmp / "us", _free_port())
    with (
        served_host(live, *eu, "h-eu", "eu-1"),
        served_host(live, *us, "h-us", "us-1"),
        Sanbox(live.url, live.key, timeout=60) as client,
    ):
        org = client.orgs.list()[0].name
        client.orgs.set_regions(org, "eu-1", [])
        _pool_ready(live, 1)
        assert [m["region"] for m in _members(live)] == ["eu-1"]
        [old] = _members(live)
        client.orgs.set_regions(org, "us-1", ["eu-1"])  # the home region moves
        made = client.computers.create(name="moved", idle_timeout=0)
        assert made.region == "us-1"
        assert not any("not handed out" in m for m in _said(live, old["id"])), (
            "a member of the old home region was claimed"
        )
        # the refill replaces the old region's member with one of the new
        _until(
            "a member in us-1 only",
            lambda: [(m["region"], m["state"]) for m in _members(live)] == [("us-1", "running")],
            timeout=60,
        )
        assert any("home region is us-1" in m for m in _said(live, old["id"])), _said(
            live, old["id"]
        )
        _call(live, "PUT", "/v1/pools/base", json={"size": 0})
        made.delete()
        _until("no member left", lambda: _members(live) == [], timeout=30)


def _pool(live: LiveServer) -> dict[str, Any]:
    [pool] = _call(live, "GET", "/v1/pools").json()["pools"]
    return dict(pool)


def _on(live: LiveServer) -> list[tuple[str | None, str]]:
    """Where the pool's members are, and their states."""
    return [(m["host"], m["state"]) for m in _members(live)]


def test_a_drain_empties_its_host_of_pool_members(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    h1, h2 = (short_tmp / "h1", _free_port()), (short_tmp / "h2", _free_port())
    with (
        served_host(live, *h1, "h1", "eu-1"),
        served_host(live, *h2, "h2", "eu-1"),
        Sanbox(live.url, live.key, timeout=60) as client,
    ):
        _pool_ready(live, 1)
        [old] = _members(live)
        other = "h2" if old["host"] == "h1" else "h1"
        client.fleet.drain(old["host"])
        _until(
            f"the member replaced on {other}, none left on {old['host']}",
            lambda: _on(live) == [(other, "running")],
            timeout=30,
        )
        assert any("its host is draining" in m for m in _said(live, old["id"])), _said(
            live, old["id"]
        )
        _until("the pool ready again", lambda: _pool(live)["ready"] == 1, timeout=30)
        assert _pool(live)["unavailable"] == 0
        _call(live, "PUT", "/v1/pools/base", json={"size": 0})
        _until("no member left", lambda: _members(live) == [], timeout=30)


@pytest.fixture
def losing_server(short_tmp: Path) -> Iterator[LiveServer]:
    """A host that misses 3 s is suspect, 6 s lost."""
    yield from serving_fleet(short_tmp, lease=3.0, lost_after=6.0)


def test_a_member_on_a_host_away_is_unavailable_and_replaced_once_it_is_lost(
    losing_server: LiveServer, short_tmp: Path
) -> None:
    # Suspect, its member is kept (not claimable: the pool waits for it; replacing at every
    # dropout made the pool's size in restores and as many deletes once the host was back);
    # lost, it is replaced on the host that answers, and trimmed once its host is back.
    live = losing_server
    hosts = {"h1": (short_tmp / "h1", _free_port()), "h2": (short_tmp / "h2", _free_port())}
    with contextlib.ExitStack() as stack:
        stops = {
            name: stack.enter_context(served_host(live, *at, name, "eu-1"))
            for name, at in hosts.items()
        }
        _pool_ready(live, 1)
        [old] = _members(live)
        away, other = old["host"], "h2" if old["host"] == "h1" else "h1"
        stops[away].set()  # its host agent goes; its member's VM runs on, out of reach
        _until(
            f"{away} suspect", lambda: {h.name: h.state for h in _hosts(live)}[away] == "suspect"
        )
        assert (_pool(live)["ready"], _on(live)) == (0, [(away, "running")]), "replaced at once"
        _until(f"{away} lost", lambda: {h.name: h.state for h in _hosts(live)}[away] == "lost")
        _until(  # replaced on the host that answers
            f"a replacement on {other}",
            lambda: (
                [h for h, state in _on(live)] == [away, other]
                and _on(live)[1] == (other, "running")
            ),
            timeout=30,
        )
        _until(  # counted apart
            "the replacement ready, the member away unavailable",
            lambda: (_pool(live)["ready"], _pool(live).get("unavailable")) == (1, 1),
            timeout=30,
        )
    with contextlib.ExitStack() as stack:  # the host is back: its member is an extra, trimmed
        for name, at in hosts.items():
            stack.enter_context(served_host(live, *at, name, "eu-1"))
        _until("one member again", lambda: len(_members(live)) == 1, timeout=30)
        assert (_pool(live)["ready"], _pool(live)["unavailable"]) == (1, 0)
        _call(live, "PUT", "/v1/pools/base", json={"size": 0})
        _until("no member left", lambda: _members(live) == [], timeout=30)
