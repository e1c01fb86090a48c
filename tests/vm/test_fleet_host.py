"""The fleet end to end with real guests: a `sanbox server` of its own and two `sanbox host serve`
processes (each with its own data dir, RAM dir, VM uid range and namespaces) joined to it over
mutual TLS. A computer placed on the first host runs there under QEMU: exec and files through
the host agent's tunnel, its egress through the host's own gateway (an allowed name reached,
another denied and the denial recorded at the server), a pause with memory and its resume, a stop
and a start; stopped, it moves to the second host (`sanbox move`) and boots there with its files;
a memory snapshot of it taken there moves back to the first host (`sanbox snapshot move`) and a
copy made of it runs there with its processes; deletes leave nothing on either host. With the
hosts in two regions, a template built in one is built on a host of it (its layers and ready
snapshot there alone), a create in the other region is refused, and one in its region restores
it there."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
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

TOP = FIRST_VM_UID + VM_UIDS
HOST_UIDS = [f"{TOP - 4096 * (i + 1)}-{TOP - 4096 * i - 1}" for i in range(2)]  # each host's part


@dataclass
class Fleet:
    srv: ServerProcess
    hosts: list[DataDir]
    ports: list[int]


@pytest.fixture
def fleet(data_dir: DataDir, internet: Internet) -> Iterator[Fleet]:
    tag = secrets.token_hex(2)
    srv = ServerProcess(data_dir, f"fleet-server-{tag}", server_env(internet))
    srv.start()
    hosts = [
        DataDir(data_dir.root / f"fleet-h{i}-{tag}", Path(f"/dev/shm/sanbox-fleet-{i}-{tag}"))
        for i in (1, 2)
    ]
    for host in hosts:
        host.root.mkdir()
        host.ram_dir.mkdir()
        (host.root / "images").symlink_to(data_dir.images)  # the built base, not its host keys
    try:
        yield Fleet(srv, hosts, [free_port(), free_port()])
    finally:
        srv.stop()
        for log in (srv.log, *(h.root / "host.log" for h in hosts)):  # shown with a failure
            print(log.name, log.read_text()[-3000:] if log.exists() else "(none)")
        for host in hosts:
            for pid in subprocess.run(
                ["pgrep", "-f", str(host.root)], capture_output=True, text=True
            ).stdout.split():  # its VMs, and its host agent should a failure have left it
                subprocess.run(["kill", "-9", pid], capture_output=True)
            network = Network(host.computers, host.tag)
            for netns in network.namespaces():  # a failed run's: nothing of it stays
                subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            shutil.rmtree(host.root, ignore_errors=True)
            shutil.rmtree(host.ram_dir, ignore_errors=True)
        shutil.rmtree(srv.data_dir.root, ignore_errors=True)


def _sanbox(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SANBOX_URL": srv.url, "SANBOX_API_KEY": srv.key}
    return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=120)


def _serve(
    f: Fleet, i: int, internet: Internet, stack: contextlib.ExitStack, region: str = "eu-1"
) -> subprocess.Popen[bytes]:
    """Host h<i+1> of `region`: joined, then its `sanbox host serve` process (stopped with the
    stack)."""
    srv, host, port = f.srv, f.hosts[i], f.ports[i]
    token = _sanbox(srv, "host", "token", "--region", region, "--host", f"h{i + 1}").stdout.strip()
    joined = _sanbox(
        srv,
        "host",
        "join",
        "--server",
        srv.url,
        "--token",
        token,
        "--name",
        f"h{i + 1}",
        "--region",
        region,
        "--address",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(host.root),
    )
    assert joined.returncode == 0, joined.stderr
    env = {
        **os.environ,
        **server_env(internet),
        "SANBOX_RAM_DIR": str(host.ram_dir),
        "SANBOX_VM_UIDS": HOST_UIDS[i],
    }
    log = stack.enter_context(open(host.root / "host.log", "ab"))  # noqa: SIM115
    agent = subprocess.Popen(
        [
            str(BIN),
            "host",
            "serve",
            "--data-dir",
            str(host.root),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    stack.callback(_stop, agent)
    return agent


def _stop(agent: subprocess.Popen[bytes]) -> None:
    """The host agent ended: asked, then killed if it has not gone in 30 s."""
    agent.terminate()
    try:
        agent.wait(30)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


def test_a_computer_on_a_fleet_host_runs_there_with_real_guests(
    fleet: Fleet, internet: Internet
) -> None:
    srv, (host, second) = fleet.srv, fleet.hosts
    with contextlib.ExitStack() as stack:
        _serve(fleet, 0, internet, stack)
        with Sanbox(srv.url, srv.key, timeout=600) as client:
            wait_for(lambda: any(h.layers for h in client.fleet.hosts()), "h1 up", 120)
            c = client.computers.create(name="far", allow=["allowed.test"], idle_timeout=0)
            assert (host.computers / c.id).is_dir() and not (srv.data_dir.computers / c.id).exists()
            assert c.region == "eu-1"
            run_as = (host.computers / c.id / "run").stat().st_uid
            assert TOP - 4096 <= run_as < TOP
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

            # stopped, it moves to the second host with its files, and boots there
            c.exec("echo moved-with-me > /root/note && sync")
            c.stop()
            _serve(fleet, 1, internet, stack)
            wait_for(lambda: sum(bool(h.layers) for h in client.fleet.hosts()) == 2, "h2 up", 120)
            moved = _sanbox(srv, "move", "far", "--to", "h2")
            assert moved.returncode == 0, moved.stderr
            assert not (host.computers / c.id).exists() and (second.computers / c.id).is_dir()
            c.start()
            run_as = (second.computers / c.id / "run").stat().st_uid
            assert TOP - 8192 <= run_as < TOP - 4096
            assert c.exec("cat /root/note").stdout == "moved-with-me\n", "its files moved"
            assert c.exec("test -f /root/ca.pem").exit_code == 0

            # a memory snapshot taken on h2 moves to h1, and a copy of it runs there with the
            # processes it had (its memory checked on h1 and sealed under h1's own key)
            c.exec("nohup sleep 20000 >/dev/null 2>&1 &")
            snap = c.snapshot(memory=True, name="far-mem")
            moved = _sanbox(srv, "snapshot", "move", "far-mem", "--to", "h1")
            assert moved.returncode == 0, moved.stderr
            assert (host.root / "snapshots" / snap.id).is_dir()
            assert not (second.root / "snapshots" / snap.id).exists()
            copy = client.computers.create(name="far-copy", from_snapshot=snap.id, idle_timeout=0)
            assert (host.computers / copy.id).is_dir(), "the copy was not made on h1"
            assert copy.memory == "restored", copy.memory_reason
            assert copy.exec("pgrep -f 'sleep 20000'").exit_code == 0, "its processes came too"
            assert copy.exec("cat /root/note").stdout == "moved-with-me\n"
            copy.delete()
            client.snapshots.delete(snap.id)
            c.delete()
            for h in (host, second):
                assert not (h.computers / c.id).exists()
                assert not Network(h.computers, h.tag).namespaces(), "namespaces left"
                assert not list(h.ram_dir.iterdir()), "RAM files left"


REGIONAL = """
name = "regional"
idle_timeout = 0
[[steps]]
run = "echo built in its region > /root/built"
"""


def _snapshot_dirs(dd: DataDir) -> set[str]:
    folder = dd.root / "snapshots"
    return (
        {p.name for p in folder.iterdir() if p.name.startswith("snp_")}
        if folder.is_dir()
        else set()
    )


def test_a_template_is_built_in_its_region_on_a_host_of_it(
    fleet: Fleet, internet: Internet, tmp_path: Path
) -> None:
    srv, (eu, us) = fleet.srv, fleet.hosts
    with contextlib.ExitStack() as stack:
        _serve(fleet, 0, internet, stack, "eu-1")
        _serve(fleet, 1, internet, stack, "us-1")
        with Sanbox(srv.url, srv.key, timeout=600) as client:
            wait_for(lambda: sum(bool(h.layers) for h in client.fleet.hosts()) == 2, "up", 120)
            org = client.orgs.list()[0].name
            client.orgs.set_regions(org, "eu-1", ["us-1"])
            (tmp_path / "sanbox.toml").write_text(REGIONAL)
            built = _sanbox(srv, "template", "build", str(tmp_path), "--region", "us-1", "-q")
            assert built.returncode == 0, built.stdout + built.stderr
            assert "built in us-1" in built.stdout, built.stdout
            template = client.templates.get("regional")
            assert template.region == "us-1" and template.ready_snapshot, template
            listed = _sanbox(srv, "template", "ls")
            assert "REGION" in listed.stdout and "us-1" in listed.stdout, listed.stdout

            # its build steps and ready snapshot are on the us-1 host alone
            on_us = _snapshot_dirs(us)
            assert len(on_us) >= 3, on_us  # a step, the configuration step, the ready snapshot
            assert not _snapshot_dirs(eu) and not _snapshot_dirs(srv.data_dir)
            assert not list(eu.computers.iterdir()), "a build computer was made on eu-1"

            # the org's home region has no build of it: refused with nothing written
            refused = _sanbox(srv, "create", "--template", "regional", "--name", "in-eu")
            assert refused.returncode == 1 and "template_not_in_region" in refused.stderr
            assert "--region eu-1" in refused.stderr, refused.stderr  # how to build it there
            assert client.computers.list() == []

            c = client.computers.create(
                name="in-us", template="regional", region="us-1", idle_timeout=0
            )
            assert (us.computers / c.id).is_dir() and c.region == "us-1"
            assert c.memory == "restored", c.memory_reason
            assert c.exec("cat /root/built").stdout == "built in its region\n"
            c.delete()

            gone = _sanbox(srv, "template", "rm", "regional", "--region", "us-1")
            assert gone.returncode == 0, gone.stderr
            left = _snapshot_dirs(us)
            assert left < on_us, "its ready snapshot stayed"  # its steps stay cached
            assert not list(us.computers.iterdir()) and not list(us.ram_dir.iterdir())
