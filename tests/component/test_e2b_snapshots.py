"""E2B's `Sandbox.list_snapshots()` (`GET /snapshots`, paged by `x-next-token`, filtered by
`sandboxID` and `name`) and `Sandbox.delete_snapshot()` (`DELETE /templates/{id or name}`, 404
read as False by the SDK). Both were answered 404: listing raised, deleting said False and kept the
snapshot. The list is every ready snapshot of the org (`sanbox snapshot`'s too); a template's name
is refused, never deleted."""

from __future__ import annotations

import pytest
from e2b.api.client.models.snapshot_info import SnapshotInfo

from .conftest import E2bStand

pytestmark = pytest.mark.component


def resting(e2b: E2bStand) -> str:
    """A sandbox paused without memory (stopped): the stand-in's running VMs cannot be
    snapshotted, its stopped ones can (on their disk)."""
    sandbox, _ = e2b.create()
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/pause", headers=e2b.api, json={"memory": False})
    assert r.status_code == 204, r.text
    return sandbox


def snapshot(e2b: E2bStand, sandbox: str, name: str | None = None) -> str:
    body: dict[str, object] = {"memory": False}
    if name is not None:
        body["name"] = name
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/snapshots", headers=e2b.api, json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["snapshotID"])


def v1_snapshots(e2b: E2bStand) -> set[str]:
    r = e2b.client.get("/v1/snapshots", headers=e2b.v1)
    assert r.status_code == 200, r.text
    return {s["id"] for s in r.json()["snapshots"]}


def listed(e2b: E2bStand, **query: str) -> list[SnapshotInfo]:
    """Every page, as the SDK's paginator reads them."""
    out: list[SnapshotInfo] = []
    token: str | None = None
    for _ in range(20):
        params = {**query, **({"nextToken": token} if token else {})}
        r = e2b.client.get("/e2b/snapshots", headers=e2b.api, params=params)
        assert r.status_code == 200, r.text
        out += [SnapshotInfo.from_dict(item) for item in r.json()]
        token = r.headers.get("x-next-token")
        if not token:
            return out
    raise AssertionError("the pages never ended")


def test_list_snapshots_pages_and_filters(e2b: E2bStand) -> None:
    first, second = resting(e2b), resting(e2b)
    a = snapshot(e2b, first, "kept")
    b = snapshot(e2b, first)
    c = snapshot(e2b, second)
    computer = second.replace("-", "_", 1)
    made = e2b.client.post(
        f"/v1/computers/{computer}/snapshots", headers=e2b.v1, json={"name": "by-v1"}
    )
    assert made.status_code in (200, 201, 202), made.text
    d = made.json()["id"]

    everything = listed(e2b)
    assert [s.snapshot_id for s in everything] == [a, b, c, d]
    assert everything[0].names == ["kept"] and everything[1].names == []
    assert [s.snapshot_id for s in listed(e2b, limit="1")] == [a, b, c, d]
    assert [s.snapshot_id for s in listed(e2b, sandboxID=first)] == [a, b]
    assert [s.snapshot_id for s in listed(e2b, name="kept")] == [a]
    assert listed(e2b, sandboxID="cmp-nothere") == []


def test_delete_snapshot_by_id_and_by_name(e2b: E2bStand) -> None:
    sandbox = resting(e2b)
    by_id = snapshot(e2b, sandbox)
    named = snapshot(e2b, sandbox, "older")

    r = e2b.client.delete(f"/e2b/templates/{by_id}", headers=e2b.api)
    assert r.status_code == 204, r.text
    assert by_id not in v1_snapshots(e2b)
    again = e2b.client.delete(f"/e2b/templates/{by_id}", headers=e2b.api)
    assert again.status_code == 404  # the SDK's False
    assert again.json()["code"] == 404 and by_id in again.json()["message"]

    r = e2b.client.delete("/e2b/templates/older", headers=e2b.api)
    assert r.status_code == 204, r.text
    assert v1_snapshots(e2b) == set()
    assert named not in {s.snapshot_id for s in listed(e2b)}
    assert e2b.client.delete("/e2b/templates/nothing", headers=e2b.api).status_code == 404


def test_a_template_is_not_deleted_through_e2b(e2b: E2bStand) -> None:
    r = e2b.client.delete("/e2b/templates/base", headers=e2b.api)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == 400
    assert "template" in r.json()["message"] and "sanbox template rm" in r.json()["message"]
    e2b.create()  # base is still there


def test_snapshots_need_the_key(e2b: E2bStand) -> None:
    assert e2b.client.get("/e2b/snapshots").status_code == 401
    assert e2b.client.delete("/e2b/templates/snp_x").status_code == 401
