"""The idle watcher's suspension looks again, under the computer's operation, at the use its
record says another API node served: that node's store may have landed after the watcher's look
(the watcher's round reads every record first, then suspends each computer in a task of its
own), and a computer used through it meanwhile is not suspended under its command."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sanbox.control import pausing
from sanbox.store import repo

from .conftest import Server

pytestmark = pytest.mark.component


def test_a_use_another_node_stored_after_the_watchers_look_stops_the_suspension(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = server.headers()
    made = server.client.post("/v1/computers", json={"name": "s", "idle_timeout": 60}, headers=h)
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    fleet = computers.fleet
    monkeypatch.setattr(fleet, "idle_for", lambda _cid: 3600.0)  # idle here for an hour
    paused: list[str] = []

    async def pause(_fleet: Any, row: Any, *_: Any) -> Any:  # a local process has no memory
        paused.append(row.id)  # to save: what the suspension reached is what is shown
        return row

    monkeypatch.setattr(pausing, "_pause_locked", pause)
    with fleet.db.session() as s:  # another node served an exec just now, and stored it
        repo.set_last_active(s, cid, datetime.now(UTC))
    suspended = server.client.portal.call(computers.suspend, cid, 60.0)  # type: ignore[union-attr]
    assert suspended is None and paused == []
    with fleet.db.session() as s:  # its use long ago: now it is idle everywhere
        repo.set_last_active(s, cid, datetime(2026, 1, 1, tzinfo=UTC))
    suspended = server.client.portal.call(computers.suspend, cid, 60.0)  # type: ignore[union-attr]
    assert suspended is not None and paused == [cid]
