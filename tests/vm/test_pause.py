"""Pause and resume with memory kept, at the host runtime: processes, tmpfs and open TCP
connections survive; a corrupt state is said and the computer boots fresh with its disk; a pause
that cannot complete leaves the computer running."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sanbox.host.image import Image
from sanbox.host.net import GUEST_IP
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec
from sanbox.host.saved.memory import PauseError

from .conftest import MakeMachine, immutable

pytestmark = pytest.mark.vm
Run = Callable[..., Any]

ECHO_SERVER = textwrap.dedent("""
    import socket
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 9000)); s.listen()
    c, _ = s.accept()
    while data := c.recv(1024):
        c.sendall(b"echo:" + data)
""")
CLIENT = textwrap.dedent("""
    import socket, sys
    c = socket.create_connection((sys.argv[1], 9000), timeout=60)
    for line in sys.stdin:
        c.sendall(line.encode()); print(c.recv(1024).decode().strip(), flush=True)
""")


@pytest.fixture(scope="module")
def pausable(make_machine: MakeMachine) -> Iterator[Machine]:
    yield make_machine(memory_mib=512)


def spec_of(machine: Machine) -> MachineSpec:
    return MachineSpec(computer_id=machine.computer_id, memory_mib=512)


def test_processes_tmpfs_and_tcp_survive(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    agent = pausable.agent
    run(
        agent.exec(
            "nohup sh -c 'while :; do date +%s%N >> /tmp/ticks; sleep 0.2; done' "
            ">/dev/null 2>&1 & echo $! > /tmp/counter.pid"
        )
    )
    run(agent.files.put("/tmp/note.txt", b"kept in tmpfs\n"))
    run(agent.files.put("/root/echo.py", ECHO_SERVER.encode()))
    run(agent.exec("nohup python3 /root/echo.py >/dev/null 2>&1 &"))
    netns = runtime.network.netns(pausable.computer_id)  # type: ignore[union-attr]
    run(agent.exec("for i in $(seq 50); do ss -ltn | grep -q :9000 && break; sleep 0.2; done"))
    client = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT, GUEST_IP],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdin and client.stdout
    try:
        client.stdin.write("before\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "echo:before"
        pid_before = run(agent.files.read("/tmp/counter.pid")).strip()
        saved = run(runtime.pause(pausable, spec_of(pausable), image))
        assert saved.size > 0 and not pausable.vm.alive()
        run(asyncio.sleep(2.0))  # asleep long enough that a clock left behind would show
        resumed, outcome = run(runtime.resume(spec_of(pausable), image))
        assert str(outcome) == "restored"
        # its clock set in the handshake (`clock_set` False: answered late, set by a call after)
        assert resumed.agent.hello.get("clock_set") is not None
        guest_time = float(run(resumed.agent.exec("date +%s.%N")).stdout)
        assert abs(guest_time - time.time()) < 1.0
        pausable.vm, pausable.agent = resumed.vm, resumed.agent
        client.stdin.write("after\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "echo:after"  # the same TCP connection
    finally:
        client.kill()
        client.communicate()
    agent = pausable.agent
    assert run(agent.files.read("/tmp/note.txt")) == b"kept in tmpfs\n"
    assert run(agent.files.read("/tmp/counter.pid")).strip() == pid_before
    assert run(agent.exec(["kill", "-0", pid_before.decode()])).exit_code == 0
    ticks = len(run(agent.files.read("/tmp/ticks")).split())
    run(asyncio.sleep(1.0))
    assert len(run(agent.files.read("/tmp/ticks")).split()) > ticks  # it goes on counting


def test_corrupt_state_boots_fresh_and_keeps_the_disk(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    run(pausable.agent.files.put("/root/on-disk.txt", b"disk survives\n"))
    run(pausable.agent.exec("sync"))
    run(runtime.pause(pausable, spec_of(pausable), image))
    vmstate = pausable.dir.state / "vmstate"
    data = bytearray(vmstate.read_bytes())
    data[len(data) // 2] ^= 0xFF
    vmstate.write_bytes(bytes(data))
    resumed, outcome = run(runtime.resume(spec_of(pausable), image))
    pausable.vm, pausable.agent = resumed.vm, resumed.agent
    assert not outcome.restored and outcome.reason == "corrupt"
    assert str(outcome) == "lost (corrupt)"
    assert run(resumed.agent.files.read("/root/on-disk.txt")) == b"disk survives\n"
    assert run(resumed.agent.exec("test -e /tmp/note.txt")).exit_code == 1  # a fresh boot


def test_corrupt_memory_is_never_restored(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """4 MiB of random bytes written into the middle of the saved memory, same size: the resume
    says so and boots fresh on the disk, instead of running a guest on changed memory."""
    run(pausable.agent.files.put("/root/on-disk.txt", b"disk survives\n"))
    run(pausable.agent.files.put("/tmp/held-in-tmpfs.txt", b"x" * 100_000))
    run(pausable.agent.exec("sync"))
    run(runtime.pause(pausable, spec_of(pausable), image))
    saved = pausable.dir.state / "memory"
    size = saved.stat().st_size
    with open(saved, "r+b") as f:
        f.seek(size // 2)
        f.write(os.urandom(4 << 20))
    assert saved.stat().st_size == size
    resumed, outcome = run(runtime.resume(spec_of(pausable), image))
    pausable.vm, pausable.agent = resumed.vm, resumed.agent
    assert str(outcome) == "lost (corrupt)"
    assert run(resumed.agent.files.read("/root/on-disk.txt")) == b"disk survives\n"
    assert run(resumed.agent.exec("test -e /tmp/held-in-tmpfs.txt")).exit_code == 1  # fresh


def test_a_manifest_from_elsewhere_is_refused(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """A manifest edited to claim another shape (or copied from another host) fails its MAC."""
    run(runtime.pause(pausable, spec_of(pausable), image))
    manifest = pausable.dir.state / "manifest.json"
    data = json.loads(manifest.read_text())
    data["memory_chunks"] = data["memory_chunks"][:-1]
    manifest.write_text(json.dumps(data))
    resumed, outcome = run(runtime.resume(spec_of(pausable), image))
    pausable.vm, pausable.agent = resumed.vm, resumed.agent
    assert str(outcome) == "lost (corrupt)"


def test_a_pause_that_cannot_complete_leaves_it_running(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    state = pausable.dir.state
    with immutable(state), pytest.raises(PauseError, match="could not"):
        run(runtime.pause(pausable, spec_of(pausable), image))
    assert pausable.vm.alive()
    assert run(pausable.agent.exec(["echo", "still here"])).stdout == b"still here\n"
    assert not list(state.glob("*.tmp"))
