"""Usage on a fleet host that goes silent (a real host agent over mutual TLS, on the local
driver): what its computers did meanwhile is not known, so the meter vouches for none of it. A
computer whose VM died while its host was silent is billed until it was last seen running, not
until the host came back and its end was found; one deleted after its host was forgotten as dead,
until its host went silent, not until the delete; one whose VM ran on all along is billed for the
time between once its host is back (its VM says it ran). No time falls between two intervals."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from .conftest import LiveServer, fake_image
from .test_fleet_settle import _processes_naming, _up
from .test_host_link import (
    _free_port,
    _hosts,
    _sanbox,
    _serving,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.component
SEEN = timedelta(seconds=2.5)  # a report every 0.2 s, a check every 0.2 s: seen this recently


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(
        short_tmp,
        lease=1.0,
        lost_after=2.0,
        usage_sample_interval=0.2,
        usage_running_period=0.5,
    )


def _running_until(live: LiveServer, computer_id: str) -> datetime | None:
    """The end of the computer's last closed interval with compute."""
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        found = db.execute(
            "SELECT max(ended_at) FROM usage_intervals WHERE computer_id = ? AND state = "
            "'running' AND ended_at IS NOT NULL",
            (computer_id,),
        ).fetchone()[0]
    return None if found is None else datetime.fromisoformat(found).replace(tzinfo=UTC)


def _open_state(live: LiveServer, computer_id: str) -> str | None:
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        found = db.execute(
            "SELECT state FROM usage_intervals WHERE computer_id = ? AND ended_at IS NULL",
            (computer_id,),
        ).fetchone()
    return None if found is None else str(found[0])


def _gaps(live: LiveServer, computer_id: str) -> list[tuple[str, str]]:
    """Where an interval of the computer does not begin where the one before it ended."""
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        rows = db.execute(
            "SELECT started_at, ended_at FROM usage_intervals WHERE computer_id = ? "
            "ORDER BY ordinal",
            (computer_id,),
        ).fetchall()
    return [(a[1], b[0]) for a, b in zip(rows, rows[1:], strict=False) if a[1] != b[0]]


def test_a_silent_hosts_computers_are_billed_until_last_seen(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    host_dir, port = short_tmp / "h1", _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    me = host_identity(DataDir(host_dir).host / "fleet")
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()

    def serving() -> contextlib.AbstractContextManager[threading.Event]:
        runtime = HostRuntime(DataDir(host_dir), LocalDriver(), networking=False)
        return _serving(HostAgent(runtime), port, me)

    with Sanbox(live.url, live.key, timeout=60) as client:
        with serving():
            _wait_until_up(f"https://127.0.0.1:{port}", control)
            _until("h1 up with its builds", lambda: _up(live, "h1"))
            died = client.computers.create(name="died", idle_timeout=0)
            kept = client.computers.create(name="kept", idle_timeout=0)
            ran = client.computers.create(name="ran", idle_timeout=0)
            every = (died.id, kept.id, ran.id)  # metered while its host answers: every 0.5 s
            _until("intervals cut", lambda: all(_running_until(live, c) for c in every))
        silent = datetime.now(UTC)  # the host agent is gone; its VMs run on
        [pid] = _processes_naming(died.id)
        os.kill(pid, signal.SIGKILL)  # one dies while no one can see it
        _until("h1 lost", lambda: _hosts(live)[0].state == "lost")
        _until("a moment later", lambda: datetime.now(UTC) > silent + 2 * SEEN)
        for c in (died, kept, ran):
            until = _running_until(live, c.id)
            assert until is not None and until < silent + SEEN, (until, silent)  # not vouched
            assert _open_state(live, c.id) == "running"
        # forgotten as dead, the one deleted: billed until its host went silent
        forgot = _sanbox(live, "host", "forget", "h1", "--confirm-dead")
        assert forgot.returncode == 0, forgot.stderr
        kept.delete()
        until = _running_until(live, kept.id)
        assert until is not None and until < silent + SEEN, (until, silent)
        assert _open_state(live, kept.id) is None
        # the host joins again: the one whose VM died is found stopped, billed until last seen
        # (the other's VM, which ran on with no record, is stopped and set aside)
        join_host(live, host_dir, port)
        with serving():
            _until("h1 back", lambda: _up(live, "h1"))
            back = datetime.now(UTC)
            _until("died found stopped", lambda: died.refresh().state == "stopped")
            until = _running_until(live, died.id)
            assert until is not None and until < silent + SEEN, (until, silent)
            assert _open_state(live, died.id) == "stopped"
            _until("kept's VM stopped", lambda: not _processes_naming(kept.id))
            # the one whose VM ran on: metered again, the time between counted
            _until("ran metered again", lambda: (_running_until(live, ran.id) or silent) > back)
            for c in (died, ran):
                assert _gaps(live, c.id) == [], "time fell between two intervals"
            died.delete()
            ran.delete()
