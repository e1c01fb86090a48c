"""Change hints across API nodes: `notify` in a transaction sends `NOTIFY channel, payload` at its
commit (send one per transaction, never one per row: NOTIFY takes a database-wide lock at
commit); a `Listener` wakes on it. It is a hint only: a listener also wakes every `poll` seconds,
and a lost connection is just a poll (it listens again at the next wait), so a reader that
re-reads what changed (events after its last id, a route's host) is correct without it.

On SQLite (one process) the hint is passed in process."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from sqlalchemy import Connection, func, select

from .pg_session import OwnSession

if TYPE_CHECKING:  # psycopg is the `postgres` extra: imported where PostgreSQL is used
    import psycopg

EVENTS, ROUTES = "sanbox_events", "sanbox_routes"

_local: defaultdict[str, list[Listener]] = defaultdict(list)
_local_lock = threading.Lock()


def notify(conn: Connection, channel: str, payload: str = "") -> None:
    """Hint `channel` listeners with `payload` when `conn`'s transaction commits."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_notify(channel, payload)))
        return
    with _local_lock:
        for listener in _local[channel]:
            listener._hint(payload)


class Listener:
    def __init__(self, url: str, channel: str, poll: float = 1.0) -> None:
        if not channel.isidentifier():
            raise ValueError(f"not a channel name: {channel!r}")
        self.channel, self.poll = channel, poll
        self._url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._pg = self._url.startswith("postgresql://")
        self._session = OwnSession()
        self._woken = threading.Event()
        self._payloads: list[str] = []
        if not self._pg:
            with _local_lock:
                _local[channel].append(self)

    def wait(self) -> list[str]:
        """The payloads hinted since the last wait, as soon as one comes; empty after `poll`
        seconds without one (or if the connection was lost): read again anyway."""
        if not self._pg:
            self._woken.wait(self.poll)
            with _local_lock:
                payloads, self._payloads = self._payloads, []
                self._woken.clear()
            return payloads
        import psycopg

        def connect() -> psycopg.Connection[tuple[object, ...]]:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=5)
            conn.execute(f"LISTEN {self.channel}")
            return conn

        try:
            conn = self._session.open(connect)
            if conn is None:  # closed for good
                time.sleep(self.poll)
                return []
            first = [n.payload for n in conn.notifies(timeout=self.poll, stop_after=1)]
            rest = [n.payload for n in conn.notifies(timeout=0.0)] if first else []
            return first + rest
        except psycopg.Error:
            self._session.drop()  # listen again at the next wait; this one counts as a poll
            return []

    @property
    def backend_pid(self) -> int | None:
        """The PostgreSQL session listening now, if any."""
        conn = self._session.conn
        return conn.info.backend_pid if conn is not None else None

    def close(self) -> None:
        self._session.close()
        with _local_lock:
            if self in _local[self.channel]:
                _local[self.channel].remove(self)

    def _hint(self, payload: str) -> None:
        self._payloads.append(payload)
        self._woken.set()
