"""The fleet tier: the fleet's coordination against the real PostgreSQL that `scripts/test`
starts (SANBOX_TEST_PG_URL), in a schema of this session's own, dropped at its end; the same
calls on SQLite where they have a single-host meaning. Skipped with the reason without it."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import pytest
from sqlalchemy import delete, insert, text

from sanbox.store import Database
from sanbox.store.db import sqlite_url
from sanbox.store.fleet_models import ApiNodeRow, HostRow, OperationRow, ReservationRow
from sanbox.store.models import ComputerRow, Org

T = TypeVar("T")
PG_URL = os.environ.get("SANBOX_TEST_PG_URL")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A URL whose connections see only a fresh schema, migrated to head."""
    yield from fresh_schema()


def fresh_schema() -> Iterator[str]:
    """A URL whose connections see only a new schema, migrated to head; dropped after."""
    if not PG_URL:
        pytest.skip("the fleet tier needs SANBOX_TEST_PG_URL (scripts/test sets it)")
    schema = f"fleet_{secrets.token_hex(4)}"
    admin = Database(PG_URL)
    with admin.engine.begin() as conn:
        conn.execute(text(f"create schema {schema}"))
    url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}options={quote(f'-csearch_path={schema}')}"
    try:
        db = Database(url)
        db.migrate()
        db.close()
        yield url
    finally:
        with admin.engine.begin() as conn:
            conn.execute(text(f"drop schema {schema} cascade"))
        admin.close()


@pytest.fixture(scope="session")
def pg_db(pg_url: str) -> Iterator[Database]:
    db = Database(pg_url)
    yield db
    db.close()


@pytest.fixture(scope="session")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(sqlite_url(Path(tmp_path_factory.mktemp("fleet")) / "fleet.db"))
    db.migrate()
    yield db
    db.close()


def _clean(db: Database) -> Database:
    with db.engine.begin() as conn:
        for table in (OperationRow, ReservationRow, ComputerRow, HostRow, Org, ApiNodeRow):
            conn.execute(delete(table))
        conn.execute(insert(Org).values(id="org_a", name="a"))
    return db


@pytest.fixture
def pg(pg_db: Database) -> Database:
    """The session's PostgreSQL schema, emptied of the fleet's rows."""
    return _clean(pg_db)


@pytest.fixture(params=["postgresql", "sqlite"])
def any_db(request: pytest.FixtureRequest) -> Database:
    """Each engine in turn, emptied of the fleet's rows."""
    return _clean(
        request.getfixturevalue("pg_db" if request.param == "postgresql" else "sqlite_db")
    )


def add_computer(db: Database, computer_id: str) -> None:
    with db.session() as s:
        s.add(
            ComputerRow(
                id=computer_id,
                org_id="org_a",
                name=computer_id,
                template="base",
                state="stopped",
                vcpus=1,
                memory_mib=256,
                disk_gib=1,
            )
        )


def wait_for(predicate: Callable[[], T | None], timeout: float = 10.0) -> T:
    """Poll `predicate` until it returns something truthy (no fixed sleep), or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")
