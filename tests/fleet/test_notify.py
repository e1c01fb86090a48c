"""LISTEN/NOTIFY as a hint: a listener wakes at the commit of a transaction that notified, long
before its poll; without a hint, or with its session killed, it still wakes at the poll."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from sanbox.fleet.notify import EVENTS, Listener, notify
from sanbox.store import Database
from sanbox.store.db import sqlite_url

pytestmark = pytest.mark.fleet


def woken(listener: Listener) -> tuple[list[str], float]:
    t0 = time.monotonic()
    return listener.wait(), time.monotonic() - t0


def test_a_notify_wakes_a_listener_at_commit(pg_url: str, pg: Database) -> None:
    listener = Listener(pg_url, EVENTS, poll=0.2)
    try:
        assert woken(listener)[0] == []  # the poll: nothing hinted
        listener.poll = 30

        def send() -> None:
            with pg.engine.begin() as conn:
                notify(conn, EVENTS, "42")
                notify(conn, "other", "x")

        threading.Timer(0.2, send).start()
        payloads, took = woken(listener)
        assert payloads == ["42"] and took < 5
        with pg.engine.begin() as conn:
            pid = listener.backend_pid
            assert conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        listener.poll = 0.2
        assert woken(listener)[0] == []  # its session died: as good as a poll
        listener.poll = 30
        threading.Timer(0.2, send).start()
        assert woken(listener)[0] == ["42"]  # listening again
    finally:
        listener.close()


def test_on_sqlite_the_hint_is_passed_in_process(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "n.db")
    db, listener = Database(url), Listener(url, EVENTS, poll=30)
    try:
        with db.engine.begin() as conn:
            notify(conn, EVENTS, "7")
        assert woken(listener)[0] == ["7"]
        listener.poll = 0.05
        assert woken(listener)[0] == []
    finally:
        listener.close()
        db.close()
