"""The watcher records a computer as exited only when its VM is known to be gone: a look that
failed (descriptors exhausted, EAGAIN, EPERM) leaves it running, and the next look after a real
exit records it stopped."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from sanbox.host.drivers import Liveness
from sanbox.host.drivers.local import LocalVm
from sanbox.host.drivers.process import liveness

from .conftest import Server
from .test_api_computers import create

pytestmark = pytest.mark.component


class Exhausted(LocalVm):
    """The same VM, seen through a host with no descriptor left: every look at /proc fails."""

    def liveness(self) -> Liveness:
        def no_fd(pid: int) -> tuple[bytes, str]:
            raise OSError(errno.EMFILE, "Too many open files")

        return liveness(self.pid, self.run_dir, read=no_fd)


def test_a_look_that_fails_is_not_a_death_and_a_real_exit_is_seen(server: Server) -> None:
    h = server.headers()
    made = create(server, name="watched")
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    watcher = server.client.app.state.vm_watcher  # type: ignore[attr-defined]
    machine = computers.fleet.machines[made["id"]]
    real = machine.vm
    machine.vm = Exhausted(real.pid, real.run_dir, real.isolation)
    server.client.portal.call(watcher.check_running)  # type: ignore[union-attr]
    assert server.client.get("/v1/computers/watched", headers=h).json()["state"] == "running"
    assert real.alive(), "the watcher killed a VM it could not check"

    os.kill(real.pid, signal.SIGKILL)  # a real exit, seen by a look that works
    deadline = time.monotonic() + 10
    while real.liveness() is not Liveness.DEAD:  # the signal is delivered, the process ends
        assert time.monotonic() < deadline, "SIGKILL did not end the agent"
        time.sleep(0.01)
    machine.vm = real
    server.client.portal.call(watcher.check_running)  # type: ignore[union-attr]
    got = server.client.get("/v1/computers/watched", headers=h).json()
    assert got["state"] == "stopped"
    events = server.client.get("/v1/computers/watched/events", headers=h).json()["events"]
    assert events[-1]["type"] == "computer.vm_exited"
