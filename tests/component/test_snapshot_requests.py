"""Snapshot and fork requests that cannot be carried out are refused with a stable code before
anything is made: no snapshot record, no computer, no files. (What snapshots and forks do is shown
on real guests in tests/vm/test_snapshots.py.)"""

from __future__ import annotations

import pytest

from .conftest import Server
from .test_api_computers import create, error

pytestmark = pytest.mark.component


def snapshots(server: Server) -> list[object]:
    r = server.client.get("/v1/snapshots", headers=server.headers())
    assert r.status_code == 200, r.text
    listed: list[object] = r.json()["snapshots"]
    return listed


def computers(server: Server) -> list[str]:
    r = server.client.get("/v1/computers", headers=server.headers())
    return [c["name"] for c in r.json()["computers"]]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "Bad Name"}, 422, "invalid_name"),
        ({"name": "x" * 64}, 422, "invalid_name"),
        ({"memory": "yes please"}, 422, "validation_error"),
        ({"extra": 1}, 422, "validation_error"),
    ],
)
def test_bad_snapshot_requests_make_nothing(
    server: Server, body: dict[str, object], status: int, code: str
) -> None:
    create(server, name="src")
    r = server.client.post("/v1/computers/src/snapshots", json=body, headers=server.headers())
    assert error(r) == (status, code), r.text
    assert snapshots(server) == []


def test_a_stopped_computer_has_no_memory_to_snapshot(server: Server) -> None:
    create(server, name="resting")
    server.client.post("/v1/computers/resting/stop", headers=server.headers())
    r = server.client.post(
        "/v1/computers/resting/snapshots", json={"memory": True}, headers=server.headers()
    )
    assert error(r) == (409, "invalid_transition")
    assert "without --memory" in r.json()["error"]["message"]
    assert snapshots(server) == []


def test_unknown_snapshots_are_not_found(server: Server) -> None:
    for method, path in [
        ("GET", "/v1/snapshots/snp_nothere"),
        ("DELETE", "/v1/snapshots/snp_nothere"),
    ]:
        r = server.client.request(method, path, headers=server.headers())
        assert error(r) == (404, "snapshot_not_found")
    r = server.client.post(
        "/v1/computers", json={"from_snapshot": "snp_nothere"}, headers=server.headers()
    )
    assert error(r) == (404, "snapshot_not_found")
    r = server.client.post("/v1/computers/nobody/snapshots", json={}, headers=server.headers())
    assert error(r) == (404, "computer_not_found")
    assert computers(server) == [] and server.data_dir.computer_ids() == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"count": 0}, "validation_error"),
        ({"count": 17}, "validation_error"),
        ({"name": "No"}, "invalid_name"),
        ({"count": 2, "name": "x" * 62}, "invalid_name"),
    ],
)
def test_bad_fork_requests_make_nothing(server: Server, body: dict[str, object], code: str) -> None:
    create(server, name="parent")
    r = server.client.post("/v1/computers/parent/fork", json=body, headers=server.headers())
    assert error(r) == (422, code), r.text
    assert computers(server) == ["parent"] and snapshots(server) == []


def test_a_fork_name_that_is_taken_makes_nothing(server: Server) -> None:
    create(server, name="parent")
    create(server, name="kid-2")
    r = server.client.post(
        "/v1/computers/parent/fork", json={"count": 3, "name": "kid"}, headers=server.headers()
    )
    assert error(r) == (409, "name_taken")
    assert "kid-2" in r.json()["error"]["message"]
    assert sorted(computers(server)) == ["kid-2", "parent"] and snapshots(server) == []
