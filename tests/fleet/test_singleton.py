"""A singleton job's advisory lock: one holder among processes; when the holder is killed -9 its
session ends and another process takes the lock within seconds. On SQLite the job just runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

import sanbox
from sanbox.fleet.singleton import Singleton, lock_key, run
from sanbox.store import Database

from .conftest import wait_for

pytestmark = pytest.mark.fleet
HOLDER = Path(__file__).with_name("singleton_holder.py")


def test_the_lock_moves_to_another_process_when_the_holder_is_killed(
    pg_url: str, pg_db: Database
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(sanbox.__file__).parents[1])}
    ours, other_job = Singleton(pg_url, "reconciler"), Singleton(pg_url, "pool-refill")
    with subprocess.Popen(
        [sys.executable, str(HOLDER), pg_url, "reconciler"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            assert not ours.held()  # the other process has it
            assert other_job.held()  # a different job's lock is its own
            holder.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            holder.wait(10)
            wait_for(ours.held, timeout=10)
            assert time.monotonic() - killed < 5
            assert ours.held()  # and keeps it
            with pg_db.engine.begin() as conn:  # its session is ended under it
                conn.execute(text("select pg_terminate_backend(:p)"), {"p": ours.backend_pid})
            assert not ours.held()  # it knows at once
            assert ours.held()  # and takes it again, being free
        finally:
            holder.kill()
            ours.close()
            other_job.close()


def test_run_runs_the_job_only_while_it_holds_the_lock(pg_url: str) -> None:
    blocker, job = Singleton(pg_url, "idle-sweep"), Singleton(pg_url, "idle-sweep")
    assert blocker.held()
    runs: list[float] = []
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(job, lambda: runs.append(1), 0.05, stop))
    thread.start()
    try:
        wait_for(lambda: job.tries >= 2)  # tried, refused
        assert runs == []
        blocker.release()
        wait_for(lambda: len(runs) >= 2)
    finally:
        stop.set()
        thread.join()
        blocker.close()


def test_on_sqlite_the_job_simply_runs(tmp_path: Path) -> None:
    job = Singleton(f"sqlite:///{tmp_path / 'x.db'}", "reconciler")
    assert job.held() and job.held()
    assert lock_key("reconciler") == lock_key("reconciler") != lock_key("pool-refill")


def test_a_closed_holder_lets_go_before_its_session_has_ended(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close()` unlocks before it ends the session: a session's end frees its locks only once
    its server process has noticed the close, and under load another node's try came first
    (CI). Here the session is left open, as a server that has not noticed yet leaves it."""
    ours, other = Singleton(pg_url, "pools"), Singleton(pg_url, "pools")
    assert ours.held()
    kept = ours._session.conn
    assert kept is not None
    monkeypatch.setattr(ours._session, "drop", lambda: None)  # the session outlives the close
    try:
        ours.close()
        assert not kept.closed
        assert other.held(), "the lock stayed with a closed holder"
    finally:
        kept.close()
        other.close()
