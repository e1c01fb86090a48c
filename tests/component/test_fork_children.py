"""A fork's children are held from the moment they are recorded until they run: a verb sent to
one meanwhile (here a delete) waits for the fork, then acts on the running computer. Before, the
delete removed the child's record while the host was still making it, and the fork then made a
VM no record named. A fork has its source's published ports, each private."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from .conftest import Server, beside, still_waiting
from .test_api_computers import create

pytestmark = pytest.mark.component


def test_a_delete_of_a_fork_still_being_made_waits_for_it(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = server.headers()
    create(server, name="src")  # stopped: the stand-in forks a computer at rest (disk copy)
    assert server.client.post("/v1/computers/src/stop", headers=h).status_code == 200
    runtime = server.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
    go = threading.Event()
    real = runtime.fork

    async def held_fork(*args: Any, **kwargs: Any) -> Any:
        await asyncio.to_thread(go.wait, 60)  # the host's work, held until the delete is sent
        return await real(*args, **kwargs)

    monkeypatch.setattr(runtime, "fork", held_fork)
    answers: dict[str, httpx.Response] = {}

    forking = beside(server, answers, "fork", "POST", "/v1/computers/src/fork", {"count": 1})
    deadline = time.monotonic() + 30
    while True:  # until the child is recorded
        listed = server.client.get("/v1/computers", headers=h).json()["computers"]
        children = [c["id"] for c in listed if c["name"] != "src"]
        if children:
            break
        assert time.monotonic() < deadline, (listed, answers)
        time.sleep(0.05)
    (child,) = children
    deleting = beside(server, answers, "delete", "DELETE", f"/v1/computers/{child}")
    still_waiting(deleting, go, "the delete did not wait for the fork")
    forking.join(60)
    deleting.join(60)
    assert answers["fork"].status_code == 201, answers["fork"].text
    assert [c["id"] for c in answers["fork"].json()["computers"]] == [child]
    assert answers["delete"].status_code == 200, answers["delete"].text
    assert server.client.get(f"/v1/computers/{child}", headers=h).status_code == 404
    assert not server.data_dir.computer(child).root.exists(), "the child's VM outlived its record"


def test_a_fork_has_its_sources_published_ports_each_private(server: Server) -> None:
    h = server.headers()
    create(server, name="web")
    for port, public in ((8000, True), (9000, False)):
        r = server.client.post(
            "/v1/computers/web/ports", json={"port": port, "public": public}, headers=h
        )
        assert r.status_code == 201, r.text
    assert server.client.post("/v1/computers/web/stop", headers=h).status_code == 200
    forked = server.client.post("/v1/computers/web/fork", json={"count": 1}, headers=h)
    assert forked.status_code == 201, forked.text
    (child,) = forked.json()["computers"]
    got = server.client.get(f"/v1/computers/{child['id']}", headers=h).json()
    assert got["ports"] == [{"port": 8000, "public": False}, {"port": 9000, "public": False}]
    server.client.delete(f"/v1/computers/{child['id']}", headers=h)
