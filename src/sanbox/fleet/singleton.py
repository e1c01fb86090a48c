"""Singleton jobs (the reconciler, pool refill, the idle and deadline sweeps): of every process
running `Singleton(url, name)`, one holds `pg_try_advisory_lock` for the name, on a connection
of its own kept open for that. PostgreSQL releases the lock when that session ends, so if the
holder dies (or its connection does; TCP keepalives bound a partition) another process takes it
at its next try. `held()` both tries and checks: call it before each run of the job.

On SQLite the server is one process: the job simply runs. The lock is per session, so it breaks
behind a transaction-pooling PgBouncer: connect it directly."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .pg_session import OwnSession

if TYPE_CHECKING:  # psycopg is the `postgres` extra: imported where PostgreSQL is used
    import psycopg


def lock_key(name: str) -> int:
    """The advisory lock's key for a job's name: 64 bits of its hash, signed like a bigint."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), signed=True)


class Singleton:
    def __init__(self, url: str, name: str, connect_timeout: int = 5, label: str = "") -> None:
        self.name = name
        self.label = label  # the session's application_name: who holds it, seen by anyone
        self.key = lock_key(name)
        self._url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._local = not self._url.startswith("postgresql://")  # SQLite: one process
        self._timeout = connect_timeout
        self._session = OwnSession()
        self._held = False
        self.tries = 0  # of taking the lock (each `held()` while not holding it)

    def held(self) -> bool:
        """True if this process holds the job's lock now (taking it if it is free)."""
        if self._local:
            return True
        import psycopg

        def connect() -> psycopg.Connection[tuple[object, ...]]:
            self._held = False  # a new session holds nothing yet
            conninfo = _with_keepalives(self._url, self._timeout, self.label)
            return psycopg.connect(conninfo, autocommit=True)

        try:
            conn = self._session.open(connect)
            if conn is None:  # closed for good
                self._held = False
            elif self._held:
                conn.execute("select 1")  # the session (and so the lock) is alive
            else:
                self.tries += 1
                row = conn.execute("select pg_try_advisory_lock(%s)", (self.key,)).fetchone()
                self._held = bool(row and row[0])
        except psycopg.Error:
            self._held = False
            self._session.drop()
        return self._held

    @property
    def holding(self) -> bool:
        """Whether the last `held()` found the lock held by this process (no database call)."""
        return self._held

    @property
    def backend_pid(self) -> int | None:
        """The PostgreSQL session that holds (or tries for) the lock, if connected."""
        conn = self._session.conn
        return conn.info.backend_pid if conn is not None else None

    def release(self) -> None:
        conn = self._session.conn
        if self._held and conn is not None and not conn.closed:
            import psycopg

            try:
                conn.execute("select pg_advisory_unlock(%s)", (self.key,))
            except psycopg.Error:
                self._session.drop()
        self._held = False

    def close(self) -> None:
        """Let the lock go and drop the session for good. The lock is released first, by
        `pg_advisory_unlock`: another process can take it as soon as this returns, where a
        closed session frees it only once its server process has noticed the close (a test
        run under load saw another node's try fail right after)."""
        self.release()
        self._session.close()


def run(
    singleton: Singleton, job: Callable[[], None], interval: float, stop: threading.Event
) -> None:
    """Run `job` every `interval` seconds while this process holds the singleton, until `stop`."""
    try:
        while not stop.is_set():
            if singleton.held():
                job()
            stop.wait(interval)
    finally:
        singleton.close()


def _with_keepalives(url: str, connect_timeout: int, label: str = "") -> str:
    """The URL with TCP keepalives on both ends: across a partition the holder finds its session
    dead, and the server ends it (freeing the lock), within about 10 s."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    server = "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=2"
    params["options"] = f"{params.get('options') or ''} {server}".strip()
    params |= {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2}
    params |= {"keepalives_count": 2, "connect_timeout": connect_timeout}
    if label:
        params["application_name"] = label[:63]
    return make_conninfo("", **params)
