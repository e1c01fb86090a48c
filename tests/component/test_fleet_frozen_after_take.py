"""On a fleet host too, a snapshot whose save left its source's vCPUs stopped (a monitor that did
not answer `cont`) is never said running as it was while its VM stays frozen: the control plane
asks the host's own handle (`frozen`, `continue_running` host calls) as it asks its own VMs. The
host agent runs in this process on the local driver, whose 'vCPUs stopped' are a SIGSTOP
(`test_frozen_after_take.Monitor`)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk.errors import SanboxError

from .conftest import LiveServer, fake_image
from .test_fleet_routing import _layers
from .test_frozen_after_take import Monitor
from .test_host_link import (
    _free_port,
    _hosts,
    _serving,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.component


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=4.0, lost_after=30.0)


@pytest.fixture
def host(fleet_server: LiveServer, short_tmp: Path) -> Iterator[Path]:
    """A joined host h1, up: its data dir."""
    host_dir = short_tmp / "h1"
    port = _free_port()
    join_host(fleet_server, host_dir, port)
    fake_image(DataDir(host_dir))
    runtime = HostRuntime(DataDir(host_dir), LocalDriver(), networking=False)
    me = host_identity(DataDir(host_dir).host / "fleet")
    with _serving(HostAgent(runtime), port, me):
        control = FleetCAs(fleet_server.data_dir.root / "fleet").control_identity()
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up", lambda: bool(_hosts(fleet_server)[0].state == "up"))
        _until("h1's builds reported", lambda: _layers(fleet_server) != [])
        yield host_dir


def _continued_at_the_end(monitor: Monitor) -> None:
    for pid in set(monitor.stopped):  # a stopped process ends only at its kill's timeout
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_fleet_snapshot_that_leaves_the_vm_frozen_puts_it_in_error_and_says_so(
    fleet_server: LiveServer, host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sanbox(fleet_server.url, fleet_server.key, timeout=60) as client:
        c = client.computers.create(name="far", idle_timeout=0)
        assert (host / "computers" / c.id).is_dir()
        monitor = Monitor(monkeypatch, None)
        try:
            with pytest.raises(SanboxError) as failed:
                c.snapshot(name="never")
            message = str(failed.value)
            assert "running as it was" not in message
            assert (
                "its VM stayed frozen (its vCPUs could not be run again) and was ended" in message
            )
            assert monitor.stopped, "the host agent's save stopped the VM"
            c.refresh()
            assert c.state == "error" and "stayed frozen" in (c.last_error or "")
            assert client.snapshots.list() == []
        finally:
            _continued_at_the_end(monitor)
        c.delete()


def test_a_fleet_snapshot_whose_continue_failed_once_runs_on_and_serves_commands(
    fleet_server: LiveServer, host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sanbox(fleet_server.url, fleet_server.key, timeout=60) as client:
        c = client.computers.create(name="far", idle_timeout=0)
        monitor = Monitor(monkeypatch, 1)
        try:
            with pytest.raises(SanboxError) as failed:
                c.snapshot(name="never")
            assert str(failed.value).endswith("the computer is still running as it was")
            assert c.refresh().state == "running"
            assert "computer.continued" in [e.type for e in c.events()]
            assert c.exec("echo on").stdout == "on\n"
        finally:
            _continued_at_the_end(monitor)
        c.delete()
