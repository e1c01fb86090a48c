"""Quotas per org: a host admin sets them; a create, fork, start, resume or snapshot that would
go past one is refused before anything is made (403 `quota_exceeded`, naming the quota, its
limit, the use and how to raise it); an org without a quota is never refused by one; concurrent
creates never together exceed one."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import update

from sanbox.store.models import ComputerRow

from .conftest import Server

pytestmark = pytest.mark.component

ORG = "default"  # the first start's org


def quota(server: Server, key: str | None = None, org: str = ORG, **limits: Any) -> Any:
    return server.client.put(f"/v1/orgs/{org}/quota", json=limits, headers=server.headers(key))


def create(server: Server, name: str, **body: Any) -> Any:
    return server.client.post(
        "/v1/computers", json={"name": name, **body}, headers=server.headers()
    )


def names(server: Server) -> set[str]:
    listed = server.client.get("/v1/computers", headers=server.headers()).json()["computers"]
    return {c["name"] for c in listed}


def refused(r: Any, what: str) -> str:
    assert r.status_code == 403, r.text
    error = r.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert what in error["message"] and "sanbox org quota default" in error["message"]
    return str(error["message"])


def test_no_quota_refuses_nothing(server: Server) -> None:
    got = server.client.get(f"/v1/orgs/{ORG}/quota", headers=server.headers()).json()
    assert set(got["limits"].values()) == {None}
    for i in range(3):
        assert create(server, f"free-{i}").status_code == 201
    got = server.client.get(f"/v1/orgs/{ORG}/quota", headers=server.headers()).json()
    assert got["use"]["running"] == 3 and got["use"]["disk_gib"] == 3


def test_running_quota_refuses_a_create_and_a_start_leaving_nothing(server: Server) -> None:
    assert quota(server, running=1).status_code == 200
    assert create(server, "one").status_code == 201
    message = refused(create(server, "two"), "running computers quota is 1")
    assert "uses 1" in message and "needs 1 more" in message
    assert names(server) == {"one"}
    assert len(server.data_dir.computer_ids()) == 1  # no folder of the refused one
    h = server.headers()
    assert server.client.post("/v1/computers/one/stop", headers=h).status_code == 200
    assert create(server, "two").status_code == 201  # a stopped computer holds no compute
    refused(server.client.post("/v1/computers/one/start", headers=h), "running computers")
    assert server.client.get("/v1/computers/one", headers=h).json()["state"] == "stopped"
    assert quota(server, running=None).status_code == 200  # lifted: it starts
    assert server.client.post("/v1/computers/one/start", headers=h).status_code == 200


def test_resume_is_checked_too(server: Server) -> None:
    """A paused computer (a local 'VM' cannot save its memory: its record says paused) is
    refused before the host is asked to resume it."""
    h = server.headers()
    assert create(server, "sleeper").status_code == 201
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        s.execute(update(ComputerRow).where(ComputerRow.name == "sleeper").values(state="paused"))
    assert create(server, "other").status_code == 201
    assert quota(server, vcpus=1).status_code == 200
    refused(server.client.post("/v1/computers/sleeper/resume", headers=h), "running vCPUs")
    assert server.client.get("/v1/computers/sleeper", headers=h).json()["state"] == "paused"


def test_memory_and_disk_quotas(server: Server) -> None:
    assert quota(server, memory_mib=800, disk_gib=2).status_code == 200
    refused(create(server, "big", memory_mib=1024), "running memory quota is 800 MiB")
    refused(create(server, "wide", disk_gib=3), "disk allocated quota is 2 GiB")
    assert names(server) == set()
    assert create(server, "fits").status_code == 201
    assert create(server, "fits-too", memory_mib=128).status_code == 201
    refused(create(server, "third", memory_mib=128), "disk allocated")


def test_fork_all_children_or_none(server: Server) -> None:
    assert create(server, "src").status_code == 201
    assert quota(server, running=2).status_code == 200
    h = server.headers()
    r = server.client.post("/v1/computers/src/fork", json={"count": 2}, headers=h)
    refused(r, "running computers")
    assert names(server) == {"src"}
    assert len(server.data_dir.computer_ids()) == 1


def test_snapshot_quota(server: Server) -> None:
    assert create(server, "snapped").status_code == 201
    assert quota(server, snapshots=0).status_code == 200
    h = server.headers()
    r = server.client.post("/v1/computers/snapped/snapshots", json={}, headers=h)
    refused(r, "snapshots quota is 0")
    assert server.client.get("/v1/snapshots", headers=h).json()["snapshots"] == []


def test_concurrent_creates_never_together_exceed_a_quota(server: Server) -> None:
    assert quota(server, running=2).status_code == 200
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: create(server, f"race-{i}"), range(6)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [201, 201, 403, 403, 403, 403], [r.text for r in answers]
    assert len(names(server)) == 2


def test_only_a_host_admin_sets_a_quota(server: Server) -> None:
    h = server.headers()
    assert server.client.post("/v1/orgs", json={"name": "acme"}, headers=h).status_code == 201
    admin = server.client.post("/v1/keys", json={"org": "acme", "admin": True}, headers=h).json()
    user = server.client.post("/v1/keys", json={"org": "acme"}, headers=h).json()
    for key in (admin["key"], user["key"]):
        r = quota(server, key, org="acme", running=100)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
        assert quota(server, key, org=ORG, running=100).status_code == 403
        r = server.client.get("/v1/orgs/default/quota", headers=server.headers(key))
        assert r.status_code == 403  # another org's: not even read
        r = server.client.get("/v1/orgs/acme/quota", headers=server.headers(key))
        assert r.status_code == 200 and r.json()["limits"]["running"] is None
    assert quota(server, org="acme", running=1).status_code == 200  # the host admin may
    got = server.client.get("/v1/orgs/acme/quota", headers=server.headers(user["key"])).json()
    assert got["limits"]["running"] == 1
    assert quota(server, org="nowhere", running=1).status_code == 404
    r = quota(server, running=-1)
    assert r.status_code == 422
