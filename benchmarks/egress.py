"""Egress through Sanbox's proxy against the same requests direct, in one run, as ratios: HTTP
request latency, download throughput, and DNS filter latency against the upstream resolver.
Runs against the test internet in namespaces (root needed); no VM: the client runs inside a
computer's namespace, where the guest would be. Usage: python benchmarks/egress.py [N]"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import summary

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.internet import ALLOWED, DNS, Internet  # noqa: E402

from sanbox.host.egress.gateway import EgressGateway  # noqa: E402
from sanbox.host.egress.policy import Policy  # noqa: E402
from sanbox.host.egress.resolver import Resolver  # noqa: E402
from sanbox.host.net import GATEWAY_IP, Network  # noqa: E402
from sanbox.host.net.firewall import HTTP_PORT  # noqa: E402

CLIENT = str(Path(__file__).parent / "_egress_client.py")


def client(prefix: list[str], host: str, port: int, dns: str, n: int) -> dict[str, object]:
    argv = [*prefix, sys.executable, CLIENT, host, str(port), "allowed.test", dns, str(n)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, object] = json.loads(out.stdout)
    return result


async def main(n: int) -> None:
    internet = Internet.start()
    folder = Path(tempfile.mkdtemp(prefix="sbbench"))
    (folder / "c1").mkdir()
    network = Network(folder, "bench")
    gateway = EgressGateway(Resolver((DNS, 53)))
    try:
        ns = (await network.ensure("c1")).netns or ""
        await gateway.start("c1", ns, Policy.of(["allowed.test"]))
        proxied = await asyncio.to_thread(
            client, ["ip", "netns", "exec", ns], GATEWAY_IP, HTTP_PORT, GATEWAY_IP, n
        )
        direct = await asyncio.to_thread(client, [], ALLOWED, 80, DNS, n)
    finally:
        await gateway.close()
        await network.remove("c1")
        internet.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{n} requests and DNS queries each; client inside the computer's namespace")
    rows = (("HTTP request", "latency"), ("DNS query (filter vs upstream)", "dns"))
    for label, key in rows:
        p, d = proxied[key], direct[key]
        assert isinstance(p, list) and isinstance(d, list)
        print(summary(f"{label}, through Sanbox", p))
        print(summary(f"{label}, direct", d))
        ratio = statistics.median(p) / statistics.median(d)
        print(f"{'ratio through / direct (median)':<44} {ratio:.2f}x")
    tp, td = float(str(proxied["throughput"])), float(str(direct["throughput"]))
    print(f"{'64 MiB download, through Sanbox':<44} {tp:9.1f} MiB/s")
    print(f"{'64 MiB download, direct':<44} {td:9.1f} MiB/s")
    print(f"{'ratio through / direct':<44} {tp / td:.2f}x")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
