"""A fleet host cut off by a partition: the host agent (a process of its own, on the local driver)
runs in a network namespace reached over a veth (203.0.113.0/30, TEST-NET-3, nothing else), and
nftables in that namespace drops every packet to it. Callers get `host_unreachable` (503) within
2 s once the link has seen the host go silent; nothing new is placed on it; its computers show
`unknown`; and when the partition heals the same VM processes answer again. At no moment do two
processes run one computer id."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.fleet.link.pki import FleetCAs
from sanbox.host.data.layout import DataDir
from sanbox.sdk.errors import SanboxError
from tests.component.conftest import LiveServer, fake_image
from tests.component.test_fleet_host_crash import _vm_processes, _Watch
from tests.component.test_fleet_routing import _refused
from tests.component.test_host_link import (
    _free_port,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOST_SIDE, HOST_ADDR = "203.0.113.1", "203.0.113.2"  # TEST-NET-3: only this veth carries it


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def netns() -> Iterator[str]:
    """A namespace for the host, its veth's far end 203.0.113.2, this side 203.0.113.1."""
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and nftables")
    tag = secrets.token_hex(2)
    ns, veth = f"sbtest-fh-{tag}", f"sbfh{tag}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "addr", "add", f"{HOST_SIDE}/30", "dev", veth)
        sh("ip", "link", "set", veth, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{HOST_ADDR}/30", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        yield ns
    finally:
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=4.0)


def _partition(ns: str, cut: bool) -> None:
    if cut:  # every packet into the host's namespace is dropped: the link hangs, nothing refuses
        rules = (
            "table inet sbpart {\n  chain input {\n"
            "    type filter hook input priority 0; policy drop;\n  }\n}\n"
        )
        done = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules.encode())
        assert done.returncode == 0, "nft refused the partition"
    else:
        sh("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "sbpart")


def test_a_partitioned_host_is_unreachable_at_once_and_comes_back_without_a_second_copy(
    fleet_server: LiveServer, netns: str, short_tmp: Path
) -> None:
    live = fleet_server
    host_dir, port = short_tmp / "h1", _free_port()
    join_host(live, host_dir, port, address=HOST_ADDR)
    fake_image(DataDir(host_dir))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    argv = [sys.executable, "-m", "tests.component.fleet_host_agent", str(host_dir), str(port)]
    agent = subprocess.Popen(["ip", "netns", "exec", netns, *argv, HOST_ADDR], env=env, cwd=ROOT)
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    try:
        _wait_until_up(f"https://{HOST_ADDR}:{port}", control)
        with Sanbox(live.url, live.key, timeout=60) as client:
            _until("h1 up", lambda: bool([h for h in client.fleet.hosts() if h.layers]))
            c = client.computers.create(name="cut", idle_timeout=0)
            pid = c.exec("echo $PPID").stdout
            watch = _Watch({c.id})

            _partition(netns, True)
            cut = time.monotonic()  # its report is due within 2 s and read in 3 s, or it is lost
            _until("the link sees it", lambda: _refused(live, c.id) is not None, timeout=30)
            assert time.monotonic() - cut < 8, "a call hung on the partitioned host's streams"
            for _ in range(3):  # from then on, every call is answered at once
                started = time.monotonic()
                refused = _refused(live, c.id)
                assert time.monotonic() - started < 2.0, "a call waited on a partitioned host"
                assert refused is not None and refused.status_code == 503, refused
                assert refused.json()["error"]["code"] == "host_unreachable", refused.text
            _until("unknown", lambda: c.refresh().state == "unknown", timeout=30)
            with pytest.raises(SanboxError) as caught:  # nothing new is placed on it
                client.computers.create(name="not-there", idle_timeout=0)
            assert caught.value.code == "insufficient_capacity", caught.value
            assert [p.name for p in (host_dir / "computers").iterdir()] == [c.id]

            _partition(netns, False)
            _until("back", lambda: c.refresh().state == "running", timeout=30)
            _until("exec again", lambda: _refused(live, c.id) is None, timeout=30)
            assert c.exec("echo $PPID").stdout == pid, "its VM was started again"
            assert watch.stop()[c.id] == 1, "two processes ran one computer"
            c.delete()
            assert not _vm_processes({c.id})
    finally:
        agent.kill()
        agent.wait(10)
