"""Template builds are held to their org's quotas and metered as computers are: a build whose VMs
would pass a quota is refused up front (403 `quota_exceeded`, nothing recorded); a build VM's
record holds its room while it runs, so builds and creates cannot together pass a quota, and a
build that finds its room taken when its VM would start ends failed with the quota's reason; its
layers count in the disk quota; its VMs' time is in the org's usage by template, in the event
feed and in the fleet's gauges. (The stand-in's builds run their steps, then fail at the first
layer: a local process cannot be snapshotted.)"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from sanbox.control import build_run
from sanbox.control.build_slots import FairSlots
from sanbox.store import repo
from sanbox.store.fleet_models import BuildVmRow
from sanbox.store.models import SnapshotRow, UsageRow

from .conftest import Server, clean_pg, serve, start_server
from .test_quotas import create, names, quota, refused
from .test_template_requests import TAR, context

pytestmark = pytest.mark.component

GIB = 1 << 30


def spec(name: str, run: str = "echo built", **resources: int) -> bytes:
    sized = "".join(f"{k} = {v}\n" for k, v in resources.items())
    return f'name = "{name}"\n[resources]\n{sized}\n[[steps]]\nrun = "{run}"\n'.encode()


def build(server: Server, body: bytes) -> Any:
    return server.client.post(
        "/v1/templates", content=context({"sanbox.toml": body}), headers={**server.headers(), **TAR}
    )


def ended(server: Server, name: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got: dict[str, Any] = server.client.get(
            f"/v1/templates/{name}", headers=server.headers()
        ).json()
        if got["state"] != "building":
            return got
        assert time.monotonic() < deadline, "the build did not end"
        time.sleep(0.05)


def use(server: Server) -> dict[str, int]:
    r = server.client.get("/v1/orgs/default/quota", headers=server.headers())
    assert r.status_code == 200, r.text
    return dict(r.json()["use"])


def wait_for_running(server: Server, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while use(server)["running"] != count:
        assert time.monotonic() < deadline, f"never {count} running"
        time.sleep(0.05)


def gauges(server: Server) -> dict[str, float]:
    r = server.client.get("/metrics", headers=server.headers())
    assert r.status_code == 200, r.text
    return {
        s.name: s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
        if s.name.startswith("sanbox_build")
    }


def test_a_build_over_a_quota_is_refused_up_front_and_records_nothing(server: Server) -> None:
    """The reviewer's case: an org with no running computers allowed builds nothing (before, its
    4 GiB build VM ran the step)."""
    assert quota(server, running=0, vcpus=1, disk_gib=1, snapshots=0).status_code == 200
    r = build(server, spec("t1", memory_mib=4096))
    message = refused(r, "running computers quota is 0")
    assert "needs 1 more" in message
    listed = server.client.get("/v1/templates", headers=server.headers()).json()["templates"]
    assert [t["name"] for t in listed] == ["base"]
    assert not (server.data_dir.root / "templates").exists()
    # the readiness VM's size counts too: its spec's vCPUs
    assert quota(server, vcpus=3).status_code == 200
    refused(build(server, spec("t2", vcpus=4)), "running vCPUs quota is 3")
    # and the build VM's memory (at least 1024 MiB, whatever its computers get)
    assert quota(server, memory_mib=1000).status_code == 200
    refused(build(server, spec("t3", memory_mib=256)), "running memory quota is 1000 MiB")


def test_a_running_build_vm_holds_its_room_against_creates(server: Server) -> None:
    """While the build VM runs a step it is a computer with compute in its org's quota and in the
    fleet's gauges; once it is gone, the room is free again."""
    assert quota(server, running=1).status_code == 200
    assert build(server, spec("held", run="sleep 3")).status_code == 202
    wait_for_running(server, 1)
    assert use(server)["memory_mib"] == 1024
    assert gauges(server)["sanbox_build_vms"] == 1
    refused(create(server, "squeezed"), "running computers quota is 1")
    assert names(server) == set()
    assert "cannot be stopped" in ended(server, "held")["error"]  # the stand-in: no snapshot
    assert use(server)["running"] == 0 and gauges(server)["sanbox_build_vms"] == 0
    assert create(server, "room-again").status_code == 201


def test_a_build_whose_room_was_taken_meanwhile_fails_with_the_quota(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The up-front check holds nothing: the build VM's record does, when it starts. A create
    that took the room while the build waited its turn leaves the build failed, honestly, and no
    VM made."""
    slots = FairSlots(1)
    monkeypatch.setattr(build_run, "BUILDS", slots)
    portal = server.client.portal
    assert portal is not None
    holding = contextlib.AsyncExitStack()
    portal.call(holding.enter_async_context, slots.held("another-org"))  # the server's one slot
    assert quota(server, running=1).status_code == 200
    assert build(server, spec("late")).status_code == 202  # room now: queued
    assert create(server, "first").status_code == 201
    portal.call(holding.aclose)
    got = ended(server, "late")
    assert got["state"] == "failed"
    assert "running computers quota is 1" in got["error"], got["error"]
    assert "sanbox org quota default" in got["error"]
    log = (server.data_dir.root / "templates" / f"{got['id']}.log").read_text()
    assert '"text": "built"' not in log  # the step never ran
    assert use(server)["running"] == 1
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        assert s.scalars(select(BuildVmRow)).all() == []


def _layer(db: Any, org_id: str, size: int) -> None:
    with db.session() as s:
        s.add(
            SnapshotRow(
                id=repo.new_id("snp_"),
                org_id=org_id,
                name=None,
                state="layer",
                computer_id=repo.new_id("bld-"),
                computer_name="build of old",
                template="old",
                image="img",
                vcpus=1,
                memory_mib=512,
                disk_gib=0,
                memory=False,
                size_bytes=size,
                env={},
                allow=[],
                idle_timeout=0,
            )
        )


def test_layers_count_in_the_disk_quota(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """An org's build layers are storage: their bytes (summed, rounded up to a GiB) are in its
    disk use, so an org at its disk quota is refused a build before anything runs (room for its
    VM's disk and its ready snapshot's memory image), and a build stops before a step when the
    org has no room left for its layer."""
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        org = repo.org_by_name(s, "default")
        assert org is not None
        org_id = org.id
    _layer(db, org_id, 2 * GIB + 1)
    assert use(server)["disk_gib"] == 3
    assert quota(server, disk_gib=4).status_code == 200
    message = refused(build(server, spec("stored")), "disk allocated quota is 4 GiB")
    assert "this needs 2 GiB more" in message  # its 1 GiB disk and 576 MiB of saved memory
    refused(create(server, "disk-too", disk_gib=2), "disk allocated quota is 4 GiB")
    # room up front; then a layer written while the build waited its turn leaves room for the
    # build VM's disk (the stand-in image's 1 GiB), none for a layer of it
    slots = FairSlots(1)
    monkeypatch.setattr(build_run, "BUILDS", slots)
    portal = server.client.portal
    assert portal is not None
    holding = contextlib.AsyncExitStack()
    portal.call(holding.enter_async_context, slots.held("another-org"))
    assert quota(server, disk_gib=5).status_code == 200
    assert build(server, spec("stored")).status_code == 202
    _layer(db, org_id, GIB)
    portal.call(holding.aclose)
    got = ended(server, "stored")
    assert got["state"] == "failed" and "disk allocated quota is 5 GiB" in got["error"]
    assert got["error"].startswith("step 1/2")
    log = (server.data_dir.root / "templates" / f"{got['id']}.log").read_text()
    assert '"text": "built"' not in log


def test_a_build_is_metered_by_template_and_in_the_feed(server: Server) -> None:
    h = server.headers()
    assert build(server, spec("metered", run="sleep 1", memory_mib=4096)).status_code == 202
    ended(server, "metered")
    r = server.client.get("/v1/usage", params={"group_by": "template"}, headers=h)
    assert r.status_code == 200, r.text
    groups = {g["key"]: g["usage"] for g in r.json()["groups"]}
    used = groups["metered"]
    assert used["build_seconds"] >= 1.0, used
    assert used["compute_seconds"] == used["build_seconds"]
    assert used["memory_gib_seconds"] == pytest.approx(4 * used["build_seconds"], rel=0.01)
    assert used["vcpu_seconds"] >= used["build_seconds"]
    assert used["seconds"] == 0 and used["running_seconds"] == 0 and used["states"] == {}
    assert r.json()["total"]["build_seconds"] == used["build_seconds"]
    csv = server.client.get("/v1/usage", params={"format": "csv"}, headers=h).text
    assert "build_seconds" in csv.splitlines()[0]
    feed = server.client.get("/v1/usage/events", headers=h)
    built = [e for e in map(_json, feed.text.splitlines()) if e["type"] == "sanbox.build.usage"]
    assert built, feed.text
    data = built[0]["data"]
    assert data["build"].startswith("bld-") and data["template"] == "metered"
    assert data["memory_mib"] == 4096 and data["vcpu_seconds"] > 0
    assert sum(e["data"]["duration_seconds"] for e in built) == pytest.approx(
        used["build_seconds"], abs=0.01
    )


def _json(line: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(line)
    return got


def test_a_build_vm_an_earlier_life_left_is_ended_where_it_was_last_seen(
    server: Server, short_tmp: Path
) -> None:
    """A server that stopped during a build: its next start forgets the VM's record (the org's
    quota freed) and closes its usage where the meter last saw it, not at the restart."""
    app: Any = server.client.app
    db = app.state.db
    with db.session() as s:
        org = repo.org_by_name(s, "default")
        assert org is not None
        vm = BuildVmRow(
            id="bld-leftbehind0",
            org_id=org.id,
            template="gone",
            node=app.state.computers.fleet.node,
        )
        vm.vcpus, vm.memory_mib, vm.disk_gib = 2, 1024, 1
        s.add(vm)  # as a build that never ended left it
    assert use(server)["running"] == 1
    server.client.__exit__(None, None, None)  # the server stops
    stopped = datetime.now(UTC)
    time.sleep(1)
    client, _settings, _dd = start_server(short_tmp)
    with client:
        again = Server(client, server.key, server.data_dir, server.settings)
        assert use(again)["running"] == 0
        with client.app.state.db.session() as s:  # type: ignore[attr-defined]
            closed = s.scalars(select(UsageRow).where(UsageRow.computer_id == vm.id)).one()
            assert closed.ended_at is not None and closed.seq is not None
            assert closed.ended_at.replace(tzinfo=UTC) <= stopped
            assert s.get(BuildVmRow, vm.id) is None


def test_builds_are_held_and_metered_on_postgresql(short_tmp: Path) -> None:
    """The same hold (the org's row locked for the check) and interval on PostgreSQL."""
    url = clean_pg()
    for server in serve(short_tmp, url):
        assert quota(server, running=1).status_code == 200
        assert build(server, spec("pg-held", run="sleep 2")).status_code == 202
        wait_for_running(server, 1)
        refused(create(server, "squeezed"), "running computers quota is 1")
        ended(server, "pg-held")
        assert use(server)["running"] == 0
        r = server.client.get(
            "/v1/usage", params={"group_by": "template"}, headers=server.headers()
        )
        used = {g["key"]: g["usage"] for g in r.json()["groups"]}["pg-held"]
        assert used["build_seconds"] >= 2.0 and used["memory_gib_seconds"] > 0
