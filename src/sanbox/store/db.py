"""The database: an engine for a URL (SQLite file in WAL mode by default), sessions, and
migrations to the latest schema with alembic on open."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).parent / "migrations"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False}
        elif url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        self.engine: Engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> None:
        """Bring the schema to the latest revision."""
        with self.engine.begin() as conn:
            cfg = alembic_config(self.url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in a transaction: committed on success, rolled back on error."""
        with self._sessions() as s, s.begin():
            yield s

    def on_flush(self, hook: Any) -> None:
        """Run `hook(session, flush_context, instances)` before every flush of its sessions."""
        event.listen(self._sessions, "before_flush", hook)

    def close(self) -> None:
        """Close its connections, and each that a thread still holds (a call in flight at
        shutdown) when it comes back: the retired pool would keep it open otherwise, until the
        garbage collector found it."""
        retired = self.engine.pool
        self.engine.dispose()  # the engine's next pool is made here, without the listener
        event.listen(retired, "checkin", _close_returned)
        retired.dispose()  # any that came back before the listener


def _close_returned(_dbapi_conn: Any, record: Any) -> None:
    record.close()
