"""Session limits per computer: none unless asked; a lifetime stops (or deletes) the computer and
says why; a max running time stops it after that much running since its last start; an exec
moves neither deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import Server

pytestmark = pytest.mark.component


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stopped(server: Server, name: str) -> Any:
    c = get(server, name)
    return c if c is not None and c["state"] == "stopped" else None


def get(server: Server, name: str) -> Any:
    r = server.client.get(f"/v1/computers/{name}", headers=server.headers())
    return r.json() if r.status_code == 200 else None


def create(server: Server, name: str, **body: Any) -> Any:
    r = server.client.post("/v1/computers", json={"name": name, **body}, headers=server.headers())
    assert r.status_code == 201, r.text
    return r.json()


def test_a_lifetime_stops_it_and_says_why_and_none_leaves_it_running(server: Server) -> None:
    create(server, "free")
    made = create(server, "brief", lifetime=6)
    assert made["lifetime"] == 6 and made["on_lifetime"] == "stop"
    assert made["lifetime_ends_at"] is not None
    ends = datetime.fromisoformat(made["lifetime_ends_at"])
    # An exec does not move the deadline. On a slow machine the deadline may come first: only
    # the execs sent well before it must be served (the stop itself is checked below).
    served = 0
    while served < 3 and datetime.now(UTC) < ends - timedelta(seconds=2):
        body = {"cmd": ["true"]}
        r = server.client.post("/v1/computers/brief/exec", json=body, headers=server.headers())
        assert r.status_code == 200 or datetime.now(UTC) >= ends, r.text
        served += r.status_code == 200
        assert get(server, "brief")["lifetime_ends_at"] == made["lifetime_ends_at"]
    assert served >= 1
    ended = wait_for(lambda: stopped(server, "brief"), "the lifetime to stop it")
    assert "its lifetime of 6s ended" in ended["last_error"]
    assert datetime.fromisoformat(ended["updated_at"]) >= ends  # not early
    events = server.client.get("/v1/computers/brief/events", headers=server.headers()).json()
    assert any("its lifetime of 6s ended" in e["message"] for e in events["events"])
    free = get(server, "free")
    assert free["state"] == "running" and free["lifetime_ends_at"] is None
    assert free["last_error"] is None


def test_a_lifetime_may_delete_it(server: Server) -> None:
    create(server, "gone", lifetime=1, on_lifetime="delete")
    wait_for(lambda: get(server, "gone") is None, "the lifetime to delete it")


def test_max_running_counts_from_the_last_start(server: Server) -> None:
    made = create(server, "runner", max_running=2)
    started = datetime.fromisoformat(made["running_ends_at"])
    ended = wait_for(lambda: stopped(server, "runner"), "max running to stop it")
    assert "max running time of 2s" in ended["last_error"]
    assert ended["running_ends_at"] is None
    r = server.client.post("/v1/computers/runner/start", headers=server.headers())
    assert r.status_code == 200 and r.json()["last_error"] is None
    assert datetime.fromisoformat(r.json()["running_ends_at"]) > started  # a new start, anew


def test_patch_sets_and_clears_limits_and_bad_values_are_refused(server: Server) -> None:
    create(server, "patched")
    h = server.headers()
    r = server.client.patch("/v1/computers/patched", json={"lifetime": 3600}, headers=h)
    assert r.status_code == 200 and r.json()["lifetime"] == 3600
    r = server.client.patch("/v1/computers/patched", json={"lifetime": 0}, headers=h)
    assert r.json()["lifetime"] == 0 and r.json()["lifetime_ends_at"] is None
    for bad in ({"lifetime": -1}, {"on_lifetime": "explode"}, {"max_running": 10**10}):
        r = server.client.patch("/v1/computers/patched", json=bad, headers=h)
        assert r.status_code == 422, (bad, r.text)
    r = server.client.post("/v1/computers", json={"name": "x", "lifetime": -5}, headers=h)
    assert r.status_code == 422
    assert get(server, "x") is None
    r = server.client.patch("/v1/computers/patched", json={"lifetime": 1}, headers=h)
    wait_for(lambda: get(server, "patched")["state"] == "stopped", "a lifetime set by PATCH")
