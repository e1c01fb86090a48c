"""A PostgreSQL session of its own (a LISTEN, an advisory lock) that a worker thread opens and
uses, and that any thread may close for good: the owner's task is cancelled while its thread is
still inside `psycopg.connect`, so a session opened after the close is closed at once, never
left to the garbage collector."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


class OwnSession:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.conn: psycopg.Connection[tuple[object, ...]] | None = None

    def open(
        self, connect: Callable[[], psycopg.Connection[tuple[object, ...]]]
    ) -> psycopg.Connection[tuple[object, ...]] | None:
        """The open session, made with `connect` if there is none; None once closed."""
        conn = self.conn
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            return None
        conn = connect()
        with self._lock:
            if not self._closed:
                self.conn = conn
                return conn
        conn.close()
        return None

    def drop(self) -> None:
        """End the session (a lost one: the next `open` makes another)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a dead session: nothing to close
                conn.close()

    def close(self) -> None:
        """End it for good: no session is opened after this."""
        with self._lock:
            self._closed = True
        self.drop()
