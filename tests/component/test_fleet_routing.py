"""A server with a joined fleet host (a real host agent over mutual TLS, on the local driver):
a create is placed on the host (its event names the host and the candidates), and every verb of
that computer goes there: exec and files through the host agent's tunnel, stop, start,
a snapshot and a computer made from it, a fork, delete; the server's own host runs none
of them. When the host agent is gone, the computer's calls answer `host_unreachable` (503 with
`Retry-After`) within seconds, and its record stays as it was; once the host is lost the computer
shows `unknown` with the reason (and an event), and when the host agent comes back, its own state
again, and it runs there."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sanbox import Sanbox
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk.errors import SanboxError

from .conftest import LiveServer, fake_image
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


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    """Leases long enough for the verbs to run, short enough to see a host lost."""
    yield from serving_fleet(short_tmp, lease=4.0, lost_after=8.0)


def test_a_computer_on_a_fleet_host_is_served_there(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    host_dir = short_tmp / "h1"
    port = _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))  # the same build as the server's own host has
    runtime = HostRuntime(DataDir(host_dir), LocalDriver(), networking=False)
    me = host_identity(DataDir(host_dir).host / "fleet")
    with _serving(HostAgent(runtime), port, me) as stop:
        control = FleetCAs(live.data_dir.root / "fleet").control_identity()
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up, holding the base build", lambda: bool(_hosts(live)[0].state == "up"))
        _until("h1's builds reported", lambda: _layers(live) != [])
        with Sanbox(live.url, live.key, timeout=60) as client:
            c = client.computers.create(name="far", idle_timeout=0)
            assert c.state == "running"
            placed = [e for e in c.events() if e.type == "computer.placed"]
            assert placed and placed[0].data["host"] == "h1", c.events()
            assert [x["host"] for x in placed[0].data["candidates"]] == ["h1"]
            on_host = host_dir / "computers" / c.id
            assert on_host.is_dir() and not (live.data_dir.computers / c.id).exists()

            r = c.exec("echo from the fleet host")
            assert (r.exit_code, r.stdout) == (0, "from the fleet host\n")
            c.files.write("/tmp/far.txt", b"kept there")
            assert c.files.read("/tmp/far.txt") == b"kept there"

            c.stop()
            assert c.refresh().state == "stopped"
            c.start()
            assert c.exec("true").exit_code == 0

            c.stop()  # a local process's vCPUs cannot be stopped: its copies are of its disk
            snap = c.snapshot(name="far-snap")
            kid = client.computers.create(name="from-snap", from_snapshot=snap.id, idle_timeout=0)
            assert (host_dir / "computers" / kid.id).is_dir()
            assert kid.exec("true").exit_code == 0
            forks = c.fork(count=1, name="far-fork")
            assert (host_dir / "computers" / forks[0].id).is_dir()
            assert not any(live.data_dir.computers.iterdir()), "the server's own host ran one"
            for other in (kid, *forks):
                other.delete()
            client.snapshots.delete(snap.id)
            assert not (host_dir / "snapshots" / snap.id).exists()
            c.start()

            # the host agent goes: the computer's calls say so within seconds, nothing changes
            stop.set()
            _until("h1's link down", lambda: _refused(live, c.id) is not None, timeout=30)
            started = time.monotonic()
            refused = _refused(live, c.id)
            assert refused is not None and time.monotonic() - started < 5
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "host_unreachable", refused.text
            assert int(refused.headers["Retry-After"]) > 0
            assert c.refresh().state in ("running", "unknown")  # never said stopped
            # silent past its lease, then lost: the computer is shown unknown, with why, and an
            # event says so; nothing is restarted anywhere
            _until("unknown", lambda: c.refresh().state == "unknown", timeout=60)
            assert "h1" in (c.unknown_reason or "") and "not known" in (c.unknown_reason or "")
            assert [x.state for x in client.computers.list()] == ["unknown"]
            _until("its event", lambda: any(e.type == "computer.unknown" for e in c.events()))
            assert not (live.data_dir.computers / c.id).exists()
        # the host agent back (a new epoch): the computer's own state again, and it runs there
        again = HostAgent(HostRuntime(DataDir(host_dir), LocalDriver(), networking=False))
        with _serving(again, port, me), Sanbox(live.url, live.key, timeout=60) as client:
            c = client.computers.get(c.id)
            _until("back", lambda: c.refresh().state == "running", timeout=30)
            assert c.unknown_reason is None
            assert any(e.type == "computer.reachable" for e in c.events())
            _until("exec again", lambda: _refused(live, c.id) is None, timeout=30)
            assert c.exec("cat /tmp/far.txt && rm /tmp/far.txt").stdout == "kept there"
            c.delete()


def _layers(live: LiveServer) -> list[str]:
    with Sanbox(live.url, live.key) as client:
        return [layer for h in client.fleet.hosts() for layer in h.layers]


def _refused(live: LiveServer, computer_id: str) -> httpx.Response | None:
    """An exec in the computer, if it was refused (None: it ran)."""
    r = httpx.post(
        f"{live.url}/v1/computers/{computer_id}/exec",
        json={"cmd": ["true"]},
        headers={"Authorization": f"Bearer {live.key}"},
        timeout=30,
    )
    return r if r.status_code >= 500 else None


def test_a_create_wider_than_this_server_is_sized_against_the_fleets_hosts(
    fleet_server: LiveServer, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's own processors bound only the computers it runs: one placed on a fleet host
    may be as wide as that host, and one wider than every host is refused with nothing made."""
    live = fleet_server
    wide = 64
    reported = HostAgent.report
    monkeypatch.setattr(HostAgent, "report", lambda self: {**reported(self), "cpus": wide})
    host_dir = short_tmp / "h1"
    port = _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    runtime = HostRuntime(DataDir(host_dir), LocalDriver(), networking=False)
    me = host_identity(DataDir(host_dir).host / "fleet")
    with _serving(HostAgent(runtime), port, me), Sanbox(live.url, live.key, timeout=60) as client:
        control = FleetCAs(live.data_dir.root / "fleet").control_identity()
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up with its builds", lambda: _layers(live) != [])
        assert [h.vcpus for h in client.fleet.hosts()] == [wide]
        here = os.cpu_count() or 1
        c = client.computers.create(name="wide", vcpus=here + 1, idle_timeout=0)
        assert (c.state, c.vcpus) == ("running", here + 1)
        assert (host_dir / "computers" / c.id).is_dir()
        with pytest.raises(SanboxError) as caught:
            client.computers.create(name="wider", vcpus=wide + 1)
        assert caught.value.code == "insufficient_capacity", caught.value
        assert [x.name for x in client.computers.list()] == ["wide"]
        c.delete()


def test_a_computer_whose_host_was_forgotten_says_so(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    """Its host forgotten as dead will never answer again: its verbs are refused with
    `host_forgotten` (409, naming the host and what to do), not a 503 to try again; a delete
    removes its record, and a snapshot's on it."""
    live = fleet_server
    host_dir, port = short_tmp / "h1", _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    runtime = HostRuntime(DataDir(host_dir), LocalDriver(), networking=False)
    me = host_identity(DataDir(host_dir).host / "fleet")
    with Sanbox(live.url, live.key, timeout=60) as client:
        with _serving(HostAgent(runtime), port, me):
            control = FleetCAs(live.data_dir.root / "fleet").control_identity()
            _wait_until_up(f"https://127.0.0.1:{port}", control)
            _until("h1 up with its builds", lambda: _layers(live) != [])
            c = client.computers.create(name="far", idle_timeout=0)
            snap = c.stop().snapshot(name="far-kept")  # on h1 too
        _until("h1 lost", lambda: _hosts(live)[0].state == "lost", timeout=60)
        forgot = _sanbox(live, "host", "forget", "h1", "--confirm-dead")
        assert forgot.returncode == 0, forgot.stderr
        r = httpx.post(
            f"{live.url}/v1/computers/{c.id}/start",
            headers={"Authorization": f"Bearer {live.key}"},
            timeout=30,
        )
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "host_forgotten", r.text
        said = r.json()["error"]["message"]
        assert "h1" in said and "delete" in said and "snapshot" in said, said
        assert "Retry-After" not in r.headers
        c.delete()
        assert client.computers.list() == []
        client.snapshots.delete(snap.id)  # its record goes too (it held the org's quota)
        assert client.snapshots.list() == []
