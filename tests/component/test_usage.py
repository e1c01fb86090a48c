"""Usage records with the stand-in server: intervals that tile a computer's life (opened and
closed with every state write, cut while running), read back as JSON, CSV and CloudEvents lines
from a cursor, each org's only its own (a host-admin key any org's); a computer's metrics; the
Prometheus endpoint scraped and parsed with prometheus_client's own parser. CPU time is
unmeasured here (a local process has no cgroup): it reads null, never 0."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from typer.testing import CliRunner

from sanbox.api import ServerSettings, create_app
from sanbox.cli.app import app as cli
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk import Sanbox
from sanbox.store.models import UsageRow

from ..conftest import kill_agents
from .conftest import (
    Server,
    clean_pg,
    fake_image,
    serve,
    served,
    start_server,
)

pytestmark = pytest.mark.component

SCRAPE_TOKEN = "scrape-token-for-tests"


class Api:
    def __init__(self, app: Any, url: str, client: httpx.Client, key: str) -> None:
        self.app, self.url, self.client, self.key = app, url, client, key

    def call(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        return self.client.request(method, path, headers=headers, **kw)

    def ok(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        r = self.call(method, path, key, **kw)
        assert r.status_code < 300, r.text
        return r

    def intervals(self, computer_id: str) -> list[UsageRow]:
        db = self.app.state.db
        with db.session() as s:
            q = select(UsageRow).where(UsageRow.computer_id == computer_id)
            return list(s.scalars(q.order_by(UsageRow.ordinal)).all())


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    root = Path(tempfile.mkdtemp(prefix="sbu", dir="/tmp"))
    dd = DataDir(root / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(
        data_dir=dd.root,
        client_config=root / "config.toml",
        watch_interval=0.2,
        usage_sample_interval=0.1,
        usage_running_period=0.5,
        metrics_token=SCRAPE_TOKEN,
    )
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
    try:
        with served(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield Api(app, url, client, app.state.first_key)
    finally:
        kill_agents(root)
        shutil.rmtree(root, ignore_errors=True)


def wait_for(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if got := check():
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def usage(api: Api, key: str | None = None, **params: Any) -> dict[str, Any]:
    got: dict[str, Any] = api.ok("GET", "/v1/usage", key, params=params).json()
    return got


def events(api: Api, key: str | None = None, **params: Any) -> list[dict[str, Any]]:
    r = api.ok("GET", "/v1/usage/events", key, params=params)
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in r.text.splitlines()]


def test_a_life_is_tiled_by_intervals_and_reads_back_the_same_every_way(api: Api) -> None:
    t0 = datetime.now().astimezone()
    made = api.ok("POST", "/v1/computers", json={"name": "metered", "disk_gib": 2}).json()
    cid = made["id"]
    wait_for(lambda: len(api.intervals(cid)) >= 4)  # cut while running (every 0.5 s here)
    api.ok("POST", "/v1/computers/metered/stop")
    api.ok("POST", "/v1/computers/metered/start")
    api.ok("DELETE", "/v1/computers/metered")
    rows = api.intervals(cid)
    assert all(r.ended_at is not None for r in rows), "a deleted computer keeps no open interval"
    for before, after in zip(rows, rows[1:], strict=False):
        assert after.started_at == before.ended_at  # no gap, no overlap
        assert after.ordinal == before.ordinal + 1 and after.seq > before.seq  # type: ignore[operator]
    states = [r.state for r in rows]
    assert states[0] == "creating" and states[-1] == "deleting"
    assert {"running", "stopping", "stopped", "starting"} <= set(states)
    assert all(r.cpu_seconds is None for r in rows)  # unmeasured here, not 0
    life = (rows[-1].ended_at - rows[0].started_at).total_seconds()  # type: ignore[operator]
    running = sum(
        (cast(datetime, r.ended_at) - r.started_at).total_seconds()  # all ended (above)
        for r in rows
        if r.state == "running"
    )

    got = usage(api, group_by="computer", **{"from": t0.isoformat()})
    mine = next(g for g in got["groups"] if g["key"] == cid)
    assert mine["name"] == "metered" and mine["template"] == "base"
    u = mine["usage"]
    assert u["seconds"] == pytest.approx(life, abs=0.01)
    assert u["running_seconds"] == pytest.approx(running, abs=0.01)
    assert u["vcpu_seconds"] == pytest.approx(u["compute_seconds"], abs=0.01)  # 1 vCPU
    assert u["disk_gib_hours"] == pytest.approx(2 * life / 3600, rel=1e-3)
    assert u["cpu_seconds"] is None and u["paused_seconds"] == 0

    table = api.ok("GET", "/v1/usage", params={"format": "csv", "from": t0.isoformat()})
    assert table.headers["content-type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(table.text)))
    row = next(r for r in parsed if r["key"] == cid)
    assert float(row["running_seconds"]) == pytest.approx(running, abs=0.01)
    assert row["cpu_seconds"] == ""  # unmeasured
    assert parsed[-1]["key"] == "total"

    by_day = usage(api, group_by="day", **{"from": t0.isoformat()})
    assert sum(g["usage"]["seconds"] for g in by_day["groups"]) == pytest.approx(
        got["total"]["seconds"], abs=0.01
    )
    by_template = usage(api, group_by="template", **{"from": t0.isoformat()})
    assert [g["key"] for g in by_template["groups"]] == ["base"]

    feed = [e for e in events(api) if e["data"]["computer"] == cid]
    assert len(feed) == len(rows) and len({e["id"] for e in feed}) == len(feed)
    assert all(e["specversion"] == "1.0" and e["type"] == "sanbox.computer.usage" for e in feed)
    assert sum(e["data"]["vcpu_seconds"] for e in feed) == pytest.approx(
        u["vcpu_seconds"], abs=0.01
    )
    assert feed[0]["subject"] == "default"


def test_the_feed_reads_on_from_a_cursor_without_repeats(api: Api) -> None:
    first = events(api, limit=3)
    assert len(first) == 3
    cursor = first[-1]["sequence"]
    rest = events(api, after=cursor)
    assert [int(e["sequence"]) for e in rest] == sorted(int(e["sequence"]) for e in rest)
    assert not {e["id"] for e in first} & {e["id"] for e in rest}
    again = events(api, after=cursor)
    assert {e["id"] for e in again} >= {e["id"] for e in rest}  # ids are stable: dedupe on them


def test_an_org_key_reads_only_its_own_org_a_host_admin_any(api: Api) -> None:
    api.ok("POST", "/v1/orgs", json={"name": "tenant"})
    key = api.ok("POST", "/v1/keys", json={"org": "tenant", "name": "t"}).json()["key"]
    mine = usage(api, key)
    assert mine["org"] == "tenant" and mine["groups"] == []
    refused = api.call("GET", "/v1/usage", key, params={"org": "default"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert api.call("GET", "/v1/usage/events", key, params={"org": "default"}).status_code == 403
    assert events(api, key) == []  # the tenant has closed nothing; the default org's are not its
    assert usage(api, org="tenant")["org"] == "tenant"  # the host admin reads any org
    assert api.call("GET", "/v1/usage", "sbk_wrong").status_code == 401


def test_a_running_computer_has_metrics_over_time(api: Api) -> None:
    api.ok("POST", "/v1/computers", json={"name": "sampled"})
    try:
        got = wait_for(
            lambda: (
                (r := api.ok("GET", "/v1/computers/sampled/metrics").json())["samples"][2:] and r
            )
        )
        last = got["samples"][-1]
        assert 0 < last["memory_used"] <= last["memory_total"]
        assert 0 < last["disk_used"] <= last["disk_total"]
        assert last["cpu_percent"] is not None and 0 <= last["cpu_percent"] <= 100
    finally:
        api.ok("DELETE", "/v1/computers/sampled")
    other = api.ok("POST", "/v1/keys", json={"org": "tenant", "name": "t2"}).json()["key"]
    assert api.call("GET", "/v1/computers/sampled/metrics", other).status_code == 404


def test_prometheus_endpoint_has_fleet_series_only(api: Api) -> None:
    """(Whatever ran before it in the module: its org and create are its own.)"""
    assert api.client.get("/metrics").status_code == 401
    api.ok("POST", "/v1/orgs", json={"name": "scraped"})
    tenant = api.ok("POST", "/v1/keys", json={"org": "scraped", "name": "t3"}).json()["key"]
    api.ok("POST", "/v1/computers", json={"name": "scraped"})
    api.ok("DELETE", "/v1/computers/scraped")
    assert api.call("GET", "/metrics", tenant).status_code == 403
    api.call("GET", "/v1/computers/nobody")  # one computer_not_found, counted by code
    r = api.call("GET", "/metrics", SCRAPE_TOKEN)
    assert r.status_code == 200, r.text
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    states = {s.labels["state"]: s.value for s in families["sanbox_computers"].samples}
    assert set(states) >= {"running", "stopped", "paused"}
    assert families["sanbox_computer_creates"].samples[0].value >= 1
    failures = {
        s.labels.get("code"): s.value
        for s in families["sanbox_failures"].samples
        if s.name == "sanbox_failures_total"
    }
    assert failures["computer_not_found"] >= 1
    for name in ("sanbox_running_vcpus", "sanbox_capacity_memory_bytes", "sanbox_pool_size"):
        assert name in families
    for family in families.values():
        for sample in family.samples:
            assert not {"org", "computer", "org_id", "computer_id"} & set(sample.labels)
    assert api.call("GET", "/metrics").status_code == 200  # the host-admin key too


def test_the_sdk_and_the_cli_read_the_same_usage(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    with Sanbox(api.url, api.key) as client:
        computer = client.computers.create(name="via-sdk")
        try:
            metrics = wait_for(lambda: (m := computer.metrics()).samples and m)
            assert metrics.computer == computer.id and metrics.samples[-1].memory_total > 0
        finally:
            computer.delete()
        found = client.usage.get(by="computer")
        mine = next(g for g in found.groups if g.key == computer.id)
        assert mine.name == "via-sdk" and mine.usage.cpu_seconds is None
        assert mine.usage.running_seconds > 0
        table = list(csv.DictReader(io.StringIO(client.usage.csv(by="template"))))
        assert table[-1]["key"] == "total"
        first, cursor = client.usage.events(limit=2)
        assert len(first) == 2 and cursor == int(first[-1]["sequence"])
        rest, end = client.usage.events(after=cursor)
        assert rest and end == int(rest[-1]["sequence"]) and end > cursor
        assert client.usage.events(after=end) == ([], end)
    monkeypatch.setenv("SANBOX_URL", api.url)
    monkeypatch.setenv("SANBOX_API_KEY", api.key)
    runner = CliRunner()
    shown = runner.invoke(cli, ["usage", "--by", "day"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "RUNNING H" in shown.output and "total" in shown.output
    exported = runner.invoke(cli, ["usage", "--csv"])
    assert exported.exit_code == 0, exported.output
    rows = list(csv.DictReader(io.StringIO(exported.output)))
    assert any(r["name"] == "via-sdk" for r in rows)


def test_a_vm_that_died_while_no_server_ran_is_counted_up_to_what_was_seen(
    server: Server, short_tmp: Path
) -> None:
    """The host rebooted (or the VM died) while the server was down: the restart closes the
    running interval at the last moment it was seen to hold, not at the restart, and counts the
    time after it as stopped (disk only)."""
    h = server.headers()
    made = server.client.post("/v1/computers", json={"name": "gone"}, headers=h).json()
    pid = int((server.data_dir.computer(made["id"]).run / "vm.pid").read_text())
    server.client.__exit__(None, None, None)  # the server stops; the 'VM' runs on ...
    seen_until = datetime.now(UTC)
    os.kill(pid, signal.SIGKILL)  # ... until the host goes down
    time.sleep(2)
    client, settings, dd = start_server(short_tmp)
    with client:
        again = Server(client, server.key, dd, settings)
        got = again.client.get("/v1/computers/gone", headers=h).json()
        assert got["state"] == "stopped"
        db = client.app.state.db  # type: ignore[attr-defined]
        with db.session() as s:
            q = select(UsageRow).where(UsageRow.computer_id == made["id"])
            rows = list(s.scalars(q.order_by(UsageRow.ordinal)).all())
        running = next(r for r in rows if r.state == "running")
        after = rows[rows.index(running) + 1]
        assert running.ended_at is not None and running.ended_at <= seen_until
        assert after.state == "stopped" and after.started_at == running.ended_at
        client.delete("/v1/computers/gone", headers=h)


def test_usage_on_postgresql(short_tmp: Path) -> None:
    """The same intervals, clock and cursor on PostgreSQL (its transaction time; row locks)."""
    url = clean_pg()
    for server in serve(short_tmp, url):
        h, client = server.headers(), server.client
        made = client.post("/v1/computers", json={"name": "pg-used"}, headers=h).json()
        assert client.post("/v1/computers/pg-used/stop", headers=h).status_code == 200
        assert client.delete("/v1/computers/pg-used", headers=h).status_code == 200
        got = client.get("/v1/usage", headers=h).json()
        mine = next(g for g in got["groups"] if g["key"] == made["id"])
        assert mine["usage"]["running_seconds"] > 0 and mine["usage"]["disk_gib_hours"] > 0
        lines = client.get("/v1/usage/events", headers=h).text.splitlines()
        feed = [json.loads(line) for line in lines]
        assert [e["data"]["state"] for e in feed][:2] == ["creating", "running"]
        starts = [e["data"]["start"] for e in feed]
        assert [e["data"]["end"] for e in feed][:-1] == starts[1:]  # they tile its life


def test_a_snapshot_is_metered_from_taken_to_deleted(api: Api) -> None:
    api.ok("POST", "/v1/computers", json={"name": "snapped"})
    api.ok("POST", "/v1/computers/snapped/stop")
    snap = api.ok("POST", "/v1/computers/snapped/snapshots", json={"name": "kept"}).json()
    try:
        rows = api.intervals(snap["id"])
        assert [(r.kind, r.state, r.ended_at) for r in rows] == [("snapshot", "ready", None)]
        assert rows[0].size_bytes == snap["size_bytes"]
        found = usage(api, group_by="computer")
        assert any(g["key"] == snap["id"] for g in found["groups"])
    finally:
        api.ok("DELETE", "/v1/snapshots/kept")
        api.ok("DELETE", "/v1/computers/snapped")
    (closed,) = api.intervals(snap["id"])
    assert closed.ended_at is not None
    feed = [e for e in events(api) if e["data"].get("snapshot") == snap["id"]]
    assert [e["type"] for e in feed] == ["sanbox.snapshot.usage"]
    assert feed[0]["data"]["size_bytes"] == snap["size_bytes"]
