"""The egress gateway in a real namespace with real nftables, against the test internet, with no
VM: a client inside the computer's namespace stands in for the guest."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sanbox.host.egress.denials import Denial
from sanbox.host.egress.gateway import EgressGateway
from sanbox.host.egress.policy import Policy
from sanbox.host.egress.resolver import Resolver
from sanbox.host.net import Network

from ..internet import DNS, Internet

pytestmark = pytest.mark.integration

QUERY = """
import socket, sys
sys.path.insert(0, sys.argv[2])
from sanbox.host.egress import dnsmsg
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(dnsmsg.build_query(sys.argv[1]), ("10.0.0.1", 53))
rcode, ips = dnsmsg.parse_a_records(s.recv(512)); print(rcode, *ips)
"""


def in_netns(netns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=30
    )


def test_gateway_in_a_real_namespace(internet: Internet) -> None:
    folder = Path(tempfile.mkdtemp(prefix="sbi"))
    (folder / "c1").mkdir()
    denied: list[tuple[str, Denial]] = []
    src = str(Path(__file__).parents[2] / "src")

    async def scenario() -> None:
        network = Network(folder, "itest")
        attachment = await network.ensure("c1")
        ns = attachment.netns or ""
        gateway = EgressGateway(Resolver((DNS, 53)), lambda *a: denied.append(a))
        try:
            await gateway.start("c1", ns, Policy.of(["allowed.test"]))
            rules = await asyncio.to_thread(in_netns, ns, "nft", "list", "table", "inet", "sanbox")
            assert "policy drop" in rules.stdout and "redirect to :8443" in rules.stdout

            def query(name: str) -> str:
                return in_netns(ns, sys.executable, "-c", QUERY, name, src).stdout.strip()

            assert await asyncio.to_thread(query, "allowed.test") == "0 198.51.100.10"
            assert await asyncio.to_thread(query, "blocked.test") == "3"  # NXDOMAIN
            curl = ["curl", "-sS", "--max-time", "5", "--cacert", str(internet.ca)]
            ok = await asyncio.to_thread(
                in_netns, ns, *curl, "-H", "Host: allowed.test", "http://10.0.0.1:8080/"
            )
            assert ok.stdout == "hello from allowed.test\n"
            tls = await asyncio.to_thread(
                in_netns,
                ns,
                *curl,
                "--resolve",
                "allowed.test:8443:10.0.0.1",
                "https://allowed.test:8443/",
            )
            assert tls.stdout == "hello from allowed.test\n", tls.stderr
            # what went upstream is counted (the usage meter's egress bytes): at least the two
            # answers and the two requests, each plain HTTP or a TLS handshake and record
            carried = gateway.carried("c1")
            assert carried is not None and carried > 2 * len(ok.stdout), carried
            assert gateway.carried("other") is None
            no = await asyncio.to_thread(
                in_netns, ns, *curl, "-H", "Host: blocked.test", "http://10.0.0.1:8080/"
            )
            assert "not in the allowlist" in no.stdout
            await gateway.update("c1", Policy.of([]))
            gone = await asyncio.to_thread(
                in_netns, ns, *curl, "-H", "Host: allowed.test", "http://10.0.0.1:8080/"
            )
            assert "not in the allowlist" in gone.stdout
        finally:
            await gateway.close()
            await network.remove("c1")
        assert ns not in subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout

    try:
        asyncio.run(scenario())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert ("c1", "denied blocked.test:53: not in the allowlist") in [
        (c, d.message()) for c, d in denied
    ]
