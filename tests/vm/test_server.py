"""The product end to end: a real `sanbox server` process driving real guests, used through the
SDK and the CLI; killed with SIGKILL and restarted; VMs killed under it; load."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.host.data.layout import DataDir
from sanbox.sdk.errors import ComputerNotRunningError

from .conftest import cli, qemu_pids
from .server import ServerProcess

pytestmark = pytest.mark.vm


def wait_state(client: Sanbox, name: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while client.computers.get(name).state != state:
        assert time.monotonic() < deadline, f"{name} never became {state}"
        time.sleep(0.2)


def test_create_exec_cp_stop_start_delete_through_the_cli(
    server: ServerProcess, client: Sanbox, tmp_path: Path
) -> None:
    r = cli(server, "create", "--name", "e2e")
    assert r.returncode == 0, r.stderr
    r = cli(server, "exec", "e2e", "--", "uname", "-a")
    assert r.returncode == 0 and "Linux e2e" in r.stdout
    assert cli(server, "exec", "e2e", "--", "sh", "-c", "exit 7").returncode == 7
    local = tmp_path / "up.txt"
    local.write_text("to the guest\n")
    assert cli(server, "cp", str(local), "e2e:/root/up.txt").returncode == 0
    assert cli(server, "exec", "e2e", "--", "cp", "/root/up.txt", "/root/down.txt").returncode == 0
    assert cli(server, "cp", "e2e:/root/down.txt", str(tmp_path / "down.txt")).returncode == 0
    assert (tmp_path / "down.txt").read_text() == "to the guest\n"
    # a stop asks every process to end and gives them time: one that needs a second to save
    # what it holds saves it; one that ignores SIGTERM is killed, and the stop is still clean
    saver = "trap 'sleep 1; echo saved > /root/saved.txt; exit 0' TERM; while :; do sleep 0.1; done"
    stubborn = "trap '' TERM; while :; do sleep 0.1; done"
    for script in (saver, stubborn):
        background = f'nohup sh -c "{script}" >/dev/null 2>&1 &'
        assert cli(server, "exec", "e2e", "--", "sh", "-c", background).returncode == 0
    r = cli(server, "stop", "e2e")
    assert r.returncode == 0
    stopped = [e for e in client.computers.get("e2e").events() if e.type == "computer.stopped"]
    assert stopped[-1].data["clean"] is True, stopped[-1]
    r = cli(server, "exec", "e2e", "--", "true")
    assert r.returncode == 1 and "computer_not_running" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
    assert cli(server, "start", "e2e").returncode == 0
    assert cli(server, "exec", "e2e", "--", "cat", "/root/up.txt").stdout == "to the guest\n"
    assert cli(server, "exec", "e2e", "--", "cat", "/root/saved.txt").stdout == "saved\n"
    computer_id = client.computers.get("e2e").id
    assert cli(server, "rm", "e2e").returncode == 0
    assert not (server.data_dir.computers / computer_id).exists()


def test_a_killed_vm_shows_as_stopped_and_starts_again(client: Sanbox) -> None:
    c = client.computers.create(name="victim", memory_mib=384)
    c.files.write("/root/mark.txt", b"kept")
    pid = int(next(p for p in qemu_pids_of(c.id)))
    os.kill(pid, signal.SIGKILL)
    wait_state(client, "victim", "stopped")
    events = [e.type for e in c.events()]
    assert events[-1] == "computer.vm_exited"
    with pytest.raises(ComputerNotRunningError):
        c.exec("true")
    c.start()
    assert c.files.read("/root/mark.txt") == b"kept"
    c.delete()


def qemu_pids_of(computer_id: str) -> list[int]:
    """VM processes of a computer (of all computers of the server tests with "")."""
    pattern = f"server-tests/computers/{computer_id}"
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_server_killed_with_sigkill_keeps_computers(server: ServerProcess, client: Sanbox) -> None:
    a = client.computers.create(name="keep-a", memory_mib=384)
    b = client.computers.create(name="keep-b", memory_mib=384)
    a.exec("nohup sleep 1000 >/dev/null 2>&1 &")
    pids = qemu_pids_of(a.id) + qemu_pids_of(b.id)
    server.kill9()
    server.start()
    with Sanbox(server.url, server.key, timeout=300) as fresh:
        for name in ("keep-a", "keep-b"):
            c = fresh.computers.get(name)
            assert c.state == "running"
            assert c.exec(["echo", name]).stdout == f"{name}\n"
        assert fresh.computers.get("keep-a").exec("pgrep -x sleep").exit_code == 0
        types = [e.type for e in fresh.computers.get("keep-a").events()]
        assert types[-1] == "computer.reattached"
    assert qemu_pids_of(a.id) + qemu_pids_of(b.id) == pids  # the same VMs, not new boots
    a.delete()
    b.delete()


def test_kill9_during_create_leaves_a_working_computer_or_nothing(
    server: ServerProcess, client: Sanbox
) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: cli(server, "create", "--name", "interrupted"))
        deadline = time.monotonic() + 60
        while not list(server.data_dir.computers.glob("*/disk.*")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # in the middle of the boot
        server.kill9()
    server.start()
    computers = client.computers.list()
    if computers:  # the create had got far enough: it finished as a working computer
        (c,) = computers
        assert c.state == "running" and c.exec("true").exit_code == 0
        c.delete()
    # or it was undone; either way nothing else is left
    assert list(server.data_dir.computers.glob("*")) == []
    assert not qemu_pids_of("")


def test_load_ten_computers_and_a_hundred_execs(client: Sanbox, data_dir: DataDir) -> None:
    before = set(qemu_pids(data_dir))
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        computers = list(
            pool.map(lambda i: client.computers.create(name=f"load-{i}", memory_mib=256), range(10))
        )
        assert all(c.state == "running" for c in computers)
        results = list(pool.map(lambda i: computers[i % 10].exec(["echo", str(i)]), range(100)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(100)]
    assert all(r.exit_code == 0 for r in results)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda c: c.delete(), computers))
    assert set(qemu_pids(data_dir)) <= before
    assert not [c for c in client.computers.list() if c.name.startswith("load-")]
