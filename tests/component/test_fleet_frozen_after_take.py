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
from sanbox.sdk.errors import SanboxError

from .conftest import LiveServer
from .fleet_hosts import served_host
from .test_frozen_after_take import Monitor
from .test_host_link import _free_port, serving_fleet

pytestmark = pytest.mark.component


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=4.0, lost_after=30.0)


@pytest.fixture
def host(fleet_server: LiveServer, short_tmp: Path) -> Iterator[Path]:
    """A joined host h1, up: its data dir."""
    with served_host(fleet_server, short_tmp / "h1", _free_port()):
        yield short_tmp / "h1"


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
