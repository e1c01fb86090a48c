"""The fleet end to end with real guests: a `sanbox server` of its own and a `sanbox host serve`
process (its own data dir, RAM dir, VM uid range and namespaces) joined to it over mutual TLS.
A computer placed on the host runs there under QEMU: exec and files through the host agent's
tunnel, its egress through the host's own gateway (an allowed name reached, another denied and
the denial recorded at the server), a pause with memory and its resume, a stop and a start, and
its delete leaves nothing on the host."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.confine import FIRST_VM_UID, VM_UIDS
from sanbox.host.net import Network
from tests.internet import Internet

from .conftest import server_env, wait_for
from .server import BIN, ServerProcess, free_port

pytestmark = pytest.mark.vm

HOST_UIDS = f"{FIRST_VM_UID + VM_UIDS - 4096}-{FIRST_VM_UID + VM_UIDS - 1}"  # the host's own part


@pytest.fixture
def fleet(data_dir: DataDir, internet: Internet) -> Iterator[tuple[ServerProcess, DataDir, int]]:
    tag = secrets.token_hex(2)
    srv = ServerProcess(data_dir, f"fleet-server-{tag}", server_env(internet))
    srv.start()
    host = DataDir(data_dir.root / f"fleet-host-{tag}", Path(f"/dev/shm/sanbox-fleet-{tag}"))
    host.root.mkdir()
    host.ram_dir.mkdir()
    (host.root / "images").symlink_to(data_dir.images)  # the built base, not its host keys
    try:
        yield srv, host, free_port()
    finally:
        srv.stop()
        for log in (srv.log, host.root / "host.log"):  # shown with a failure
            print(log.name, log.read_text()[-3000:] if log.exists() else "(none)")
        for pid in subprocess.run(
            ["pgrep", "-f", str(host.computers)], capture_output=True, text=True
        ).stdout.split():
            subprocess.run(["kill", "-9", pid], capture_output=True)
        network = Network(host.computers, host.tag)
        for netns in network.namespaces():  # a failed run's: nothing of it stays
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        shutil.rmtree(srv.data_dir.root, ignore_errors=True)
        shutil.rmtree(host.root, ignore_errors=True)
        shutil.rmtree(host.ram_dir, ignore_errors=True)


def _sanbox(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SANBOX_URL": srv.url, "SANBOX_API_KEY": srv.key}
    return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_computer_on_a_fleet_host_runs_there_with_real_guests(
    fleet: tuple[ServerProcess, DataDir, int], internet: Internet
) -> None:
    srv, host, port = fleet
    token = _sanbox(srv, "host", "token", "--region", "eu-1").stdout.strip()
    joined = _sanbox(
        srv, "host", "join", "--server", srv.url, "--token", token, "--name", "h1",
        "--region", "eu-1", "--address", "127.0.0.1", "--port", str(port),
        "--data-dir", str(host.root),
    )  # fmt: skip
    assert joined.returncode == 0, joined.stderr
    env = {**os.environ, **server_env(internet), "SANBOX_RAM_DIR": str(host.ram_dir),
           "SANBOX_VM_UIDS": HOST_UIDS}  # fmt: skip
    log = open(host.root / "host.log", "ab")  # noqa: SIM115 (closed below)
    agent = subprocess.Popen(
        [str(BIN), "host", "serve", "--data-dir", str(host.root), "--port", str(port),
         "--log-level", "warning"],
        env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        with Sanbox(srv.url, srv.key, timeout=600) as client:
            wait_for(lambda: any(h.layers for h in client.fleet.hosts()), "h1 up", 120)
            c = client.computers.create(name="far", allow=["allowed.test"], idle_timeout=0)
            assert (host.computers / c.id).is_dir() and not (srv.data_dir.computers / c.id).exists()
            assert c.region == "eu-1"
            run_as = (host.computers / c.id / "run").stat().st_uid
            assert FIRST_VM_UID + VM_UIDS - 4096 <= run_as < FIRST_VM_UID + VM_UIDS
            assert c.exec("uname -s").stdout == "Linux\n"
            c.files.write("/root/ca.pem", internet.ca.read_bytes())
            assert c.files.read("/root/ca.pem") == internet.ca.read_bytes()

            curl = "curl -sS --max-time 8 --cacert /root/ca.pem "
            got = c.exec(["sh", "-c", curl + "https://allowed.test/"])
            assert got.stdout == "hello from allowed.test\n", got.stdout + got.stderr
            assert c.exec(["sh", "-c", curl + "https://blocked.test/"]).exit_code != 0
            wait_for(
                lambda: any(e.type == "network.denied" for e in c.events()),
                "the host's denial recorded at the server",
                30,
            )

            c.exec("nohup sleep 10000 >/dev/null 2>&1 &")
            c.pause()
            assert c.refresh().state == "paused"
            c.resume()
            assert c.refresh().memory == "restored"
            assert c.exec("pgrep -x sleep").exit_code == 0, "its processes came back"
            c.stop()
            c.start()
            assert c.exec("test -f /root/ca.pem").exit_code == 0, "its disk kept"
            c.delete()
            assert not (host.computers / c.id).exists()
            assert not Network(host.computers, host.tag).namespaces(), "namespaces left"
            assert not list(host.ram_dir.iterdir()), "RAM files left"
    finally:
        agent.terminate()
        agent.wait(30)
        log.close()
