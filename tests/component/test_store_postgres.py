"""The same API on PostgreSQL (`--database-url`): migrations, bootstrap, computers, events."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from sanbox.store import Database
from sanbox.store.db import alembic_config

from .conftest import Server, clean_pg, serve

pytestmark = pytest.mark.component
PG_URL = os.environ.get("SANBOX_TEST_PG_URL")


@pytest.fixture
def pg_server(short_tmp: Path) -> Iterator[Server]:
    yield from serve(short_tmp, clean_pg())


def test_api_on_postgresql(pg_server: Server) -> None:
    h = pg_server.headers()
    client = pg_server.client
    r = client.post("/v1/computers", json={"name": "pg-one", "labels": {"db": "pg"}}, headers=h)
    assert r.status_code == 201, r.text
    assert client.post("/v1/computers", json={"name": "pg-one"}, headers=h).status_code == 409
    r = client.post("/v1/computers/pg-one/exec", json={"cmd": ["echo", "pg"]}, headers=h)
    assert r.json()["stdout"] == "pg\n"
    listed = client.get("/v1/computers?label=db=pg", headers=h).json()["computers"]
    assert [c["name"] for c in listed] == ["pg-one"]
    events = client.get("/v1/computers/pg-one/events", headers=h).json()["events"]
    assert [e["type"] for e in events] == ["computer.creating", "computer.running"]
    assert client.delete("/v1/computers/pg-one", headers=h).json()["state"] == "deleted"
    db = Database(PG_URL or "")
    with db.engine.connect() as conn:
        head = ScriptDirectory.from_config(alembic_config(PG_URL or "")).get_current_head()
        assert conn.execute(text("select version_num from alembic_version")).scalar() == head
        assert conn.execute(text("select count(*) from computers")).scalar() == 0
    db.close()


def test_a_connection_a_thread_returns_after_close_is_closed() -> None:
    """A call in flight at shutdown (a watcher's thread) gives its connection back after the
    database closed: it is closed then, not left open in the retired pool for the collector."""
    if not PG_URL:
        pytest.skip("PostgreSQL tests need SANBOX_TEST_PG_URL (scripts/test sets it)")
    db = Database(PG_URL)
    inside, done = threading.Event(), threading.Event()
    held: list[Any] = []

    def hold() -> None:
        with db.session() as s:
            s.execute(text("select 1"))
            held.append(s.connection().connection.dbapi_connection)
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(10)
    db.close()
    assert not held[0].closed  # still in use by the thread
    done.set()
    thread.join(10)
    assert held[0].closed
    with db.session() as s:  # a closed database opens again, and pools again
        s.execute(text("select 1"))
    assert isinstance(db.engine.pool, QueuePool)  # PostgreSQL's pool: it counts connections
    assert db.engine.pool.checkedin() == 1
    db.close()
