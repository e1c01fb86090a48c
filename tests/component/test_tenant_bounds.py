"""A tenant is bounded: a key past its request rate gets 429 `rate_limited` with Retry-After (its
WebSockets included) while other keys go on; an org's pools are bounded in number and members;
an org's audit is bounded in age and count, swept off the request path."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from sanbox.api import ServerSettings, create_app
from sanbox.control.audit import AuditEntry, AuditLog
from sanbox.control.pools import Pools
from sanbox.control.retention import Sweeper
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.store import AuditRow, Database
from sanbox.store.models import EventRow, PoolRow

from .conftest import fake_image

pytestmark = pytest.mark.component


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def _client(root: Path, clock: Clock, **settings: Any) -> TestClient:
    dd = DataDir(root / "data")
    dd.ensure()
    fake_image(dd)
    config = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2, **settings)
    runtime = HostRuntime(dd, LocalDriver(), networking=False)
    return TestClient(create_app(config, runtime, clock=clock))


@pytest.fixture
def bounded(short_tmp: Path) -> Iterator[tuple[TestClient, str, Clock]]:
    clock = Clock()
    client = _client(short_tmp, clock, key_rate=2.0, key_burst=5, org_max_pool_members=3)
    with client:
        yield client, client.app.state.first_key, clock  # type: ignore[attr-defined]


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error(r: Any) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def test_a_key_past_its_rate_is_told_to_wait_and_others_go_on(
    bounded: tuple[TestClient, str, Clock],
) -> None:
    client, root, clock = bounded
    other = client.post("/v1/keys", headers=h(root), json={"name": "other"}).json()["key"]
    assert all(client.get("/v1/computers", headers=h(root)).status_code == 200 for _ in range(4))
    r = client.get("/v1/computers", headers=h(root))
    assert error(r) == (429, "rate_limited") and r.headers["retry-after"] == "1"
    assert "request rate" in r.json()["error"]["message"]
    assert error(client.post("/v1/computers/x/stop", headers=h(root))) == (429, "rate_limited")
    with client.websocket_connect("/v1/computers/x/exec/stream", headers=h(root)) as ws:
        assert ws.receive_json()["code"] == "rate_limited"
    assert client.get("/v1/computers", headers=h(other)).status_code == 200  # its own bucket
    clock.now += 1.0  # two more a second
    assert client.get("/v1/computers", headers=h(root)).status_code == 200
    assert client.get("/v1/computers", headers=h(root)).status_code == 200
    assert error(client.get("/v1/computers", headers=h(root))) == (429, "rate_limited")


def test_an_org_past_its_rate_across_its_keys_and_sandboxes_waits_and_others_go_on(
    bounded: tuple[TestClient, str, Clock],
) -> None:
    client, root, clock = bounded  # 2/s and bursts of 5 a key: 8/s and bursts of 20 an org
    made_keys = [client.post("/v1/keys", headers=h(root), json={"name": f"k{i}"}) for i in range(5)]
    keys = [r.json()["key"] for r in made_keys]
    clock.now += 10
    client.post("/v1/orgs", headers=h(root), json={"name": "else"})
    other = client.post("/v1/keys", headers=h(root), json={"org": "else", "name": "e"}).json()[
        "key"
    ]
    clock.now += 10  # every bucket full again
    went = sum(client.get("/v1/computers", headers=h(k)).status_code == 200 for k in keys * 5)
    assert went == 20, "the org's keys together went past the org's burst"
    r = client.get("/v1/computers", headers=h(root))  # its own bucket is full: the org's is not
    assert error(r) == (429, "rate_limited") and "this org" in r.json()["error"]["message"]
    assert client.get("/v1/computers", headers=h(other)).status_code == 200  # another org
    clock.now += 10
    made = client.post("/e2b/sandboxes", headers={"X-API-KEY": root}, json={"templateID": "base"})
    assert made.status_code == 201, made.text
    sandbox, token = made.json()["sandboxID"], made.json()["envdAccessToken"]
    envd = {"E2b-Sandbox-Id": sandbox, "X-Access-Token": token}
    answers = [client.get("/e2b-envd/health", headers=envd).status_code for _ in range(25)]
    assert answers.count(204) <= 20 and answers[-1] == 429, answers  # envd calls count too
    clock.now += 10
    client.delete(f"/e2b/sandboxes/{sandbox}", headers={"X-API-KEY": root})


def test_a_published_port_counts_against_the_key(bounded: tuple[TestClient, str, Clock]) -> None:
    client, root, _ = bounded
    for _ in range(5):
        client.get("/v1/computers", headers=h(root))
    r = client.get("/", headers={**h(root), "Host": "8080-nope.localhost"})
    assert error(r) == (429, "rate_limited")


def test_an_org_s_pools_are_bounded(bounded: tuple[TestClient, str, Clock]) -> None:
    client, root, clock = bounded
    r = client.put("/v1/pools/base", headers=h(root), json={"size": 4})
    assert error(r) == (422, "too_many_pool_members") and "3 in all" in r.json()["error"]["message"]
    clock.now += 10
    assert client.get("/v1/pools", headers=h(root)).json() == {"pools": []}  # nothing kept
    assert client.put("/v1/pools/base", headers=h(root), json={"size": 0}).status_code == 200


def test_pool_bounds_count_pools_and_members_across_the_org() -> None:
    pools = Pools.__new__(Pools)  # the bound is pure arithmetic over the org's pool records
    pools.max_pools, pools.max_members = 2, 5
    rows = [
        PoolRow(template="a", size=2),
        PoolRow(template="b", size=2),
        PoolRow(template="c", size=0),
    ]
    pools._check_bounds(rows, "a", 3)  # resizing one of the two: 5 in all
    pools._check_bounds(rows, "c", 0)  # an empty pool is no pool
    pools._check_bounds(rows, "b", 0)  # shrinking always goes
    with pytest.raises(Exception, match="pools") as exc:
        pools._check_bounds(rows, "c", 1)  # a third pool of a size above 0
    assert getattr(exc.value, "code", None) == "too_many_pools"
    with pytest.raises(Exception, match="computers") as exc:
        pools._check_bounds(rows, "a", 4)
    assert getattr(exc.value, "code", None) == "too_many_pool_members"


def test_an_org_s_audit_is_kept_to_its_cap_and_retention(short_tmp: Path) -> None:
    db = Database(f"sqlite:///{short_tmp / 'audit.db'}")
    db.migrate()
    with db.session() as s:
        from sanbox.store import repo

        acme, other = repo.create_org(s, "acme").id, repo.create_org(s, "other").id
    log = AuditLog(db, retention=timedelta(days=90), org_cap=5, batch=2)
    now = datetime(2027, 6, 1, tzinfo=UTC)
    for i in range(3):
        log.record(
            AuditEntry(
                "POST /v1/old", 200, key_id="k2", org_id=other, at=now - timedelta(days=93 - i)
            )
        )
    for i in range(12):
        log.record(
            AuditEntry(
                "POST /v1/x", 200, key_id="k1", org_id=acme, at=now - timedelta(minutes=12 - i)
            )
        )
    log.record(AuditEntry("POST /v1/new", 200, key_id="k2", org_id=other, at=now))

    def count(org: str) -> int:
        with db.session() as s:
            return int(s.scalar(select(func.count()).where(AuditRow.org_id == org)) or 0)

    assert (count(acme), count(other)) == (12, 4)  # writes never prune an org's records
    gone = log.sweep(now)
    assert gone == 7 + 3 and (count(acme), count(other)) == (5, 1)
    with db.session() as s:
        kept = s.scalars(select(AuditRow.created_at).where(AuditRow.org_id == acme)).all()
    assert sorted(kept) == [now - timedelta(minutes=m) for m in (5, 4, 3, 2, 1)]  # the newest
    assert log.sweep(now) == 0
    db.close()


def test_an_org_s_events_are_kept_to_their_retention_and_cap(short_tmp: Path) -> None:
    # A guest's denials write up to 60 events a minute per computer, and every state change
    # writes one: the store keeps events 30 days and an org's newest million (settings), swept
    # as the audit log is; the server sweeps them every 5 minutes.
    db = Database(f"sqlite:///{short_tmp / 'events.db'}")
    db.migrate()
    with db.session() as s:
        from sanbox.store import repo

        acme, other = repo.create_org(s, "acme").id, repo.create_org(s, "other").id
    now = datetime(2027, 6, 1, tzinfo=UTC)
    with db.session() as s:
        for i in range(3):  # past the retention
            s.add(EventRow(org_id=other, type="t", created_at=now - timedelta(days=33 - i)))
        for i in range(12):  # a denial flood: past the org's cap
            s.add(EventRow(org_id=acme, type="t", created_at=now - timedelta(minutes=12 - i)))
        s.add(EventRow(org_id=other, type="t", created_at=now))
    kept = Sweeper(db, EventRow, "events", timedelta(days=30), org_cap=5, batch=2)

    def count(org: str) -> int:
        with db.session() as s:
            return int(s.scalar(select(func.count()).where(EventRow.org_id == org)) or 0)

    assert kept.sweep(now) == 3 + 7 and (count(acme), count(other)) == (5, 1)
    with db.session() as s:
        newest = s.scalars(select(EventRow.created_at).where(EventRow.org_id == acme)).all()
    assert sorted(newest) == [now - timedelta(minutes=m) for m in (5, 4, 3, 2, 1)]
    assert kept.sweep(now) == 0
    db.close()


def test_the_server_sweeps_events_with_the_settings_given(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANBOX_EVENT_RETENTION_DAYS", "7")
    monkeypatch.setenv("SANBOX_EVENT_ORG_CAP", "1234")
    read = ServerSettings.from_env()
    assert (read.event_retention_days, read.event_org_cap) == (7.0, 1234)
    with _client(short_tmp, Clock(), event_retention_days=7.0, event_org_cap=1234) as client:
        swept = client.app.state.events_kept  # type: ignore[attr-defined]
        assert (swept.retention, swept.org_cap) == (timedelta(days=7), 1234)
