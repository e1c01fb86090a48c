"""The same API on PostgreSQL (`--database-url`): migrations, bootstrap, computers, events."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from sanbox.store import Database
from sanbox.store.db import alembic_config

from .conftest import Server, serve

pytestmark = pytest.mark.component
PG_URL = os.environ.get("SANBOX_TEST_PG_URL")


@pytest.fixture
def pg_server(short_tmp: Path) -> Iterator[Server]:
    if not PG_URL:
        pytest.skip("PostgreSQL tests need SANBOX_TEST_PG_URL (scripts/test sets it)")
    db = Database(PG_URL)
    with db.engine.begin() as conn:  # a clean database for each test
        conn.execute(text("drop schema public cascade"))
        conn.execute(text("create schema public"))
    db.close()
    yield from serve(short_tmp, PG_URL)


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
