"""Egress through Sanbox's proxy against the same requests direct, in one run, as ratios: HTTP
request latency, download throughput, and DNS filter latency against the upstream resolver; then
HTTPS to one host through the proxy, intercepted with a secret injected against passed through
(request latency on new and on kept-alive connections, a 64 MiB download). Runs against the test
internet in namespaces (root needed); no VM: the client runs inside a computer's namespace, where
the guest would be. Usage: python benchmarks/egress.py [N]"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import summary

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.internet import ALLOWED, DNS, Internet  # noqa: E402

from sanbox.host.egress.gateway import EgressGateway  # noqa: E402
from sanbox.host.egress.injection import Injection  # noqa: E402
from sanbox.host.egress.org_ca import Minter, new_ca, upstream_context  # noqa: E402
from sanbox.host.egress.policy import Policy  # noqa: E402
from sanbox.host.egress.resolver import Resolver  # noqa: E402
from sanbox.host.net import GATEWAY_IP, Network  # noqa: E402
from sanbox.host.net.firewall import HTTP_PORT, TLS_PORT  # noqa: E402

CLIENT = str(Path(__file__).parent / "_egress_client.py")
TLS_CLIENT = str(Path(__file__).parent / "_tls_client.py")


class Bench:
    """The secret proxy's view of one bound secret for echo.test (no control plane here)."""

    def __init__(self, internet_ca: Path, on: bool) -> None:
        self.on = on
        self.minter = Minter(*new_ca("bench"))
        self.upstream_context = upstream_context(internet_ca)
        self.strict_placeholders = False
        self.secret = Injection(hosts=("echo.test",), header=b"Authorization",
                                template=b"Bearer {value}", placeholder=b"sbx_ph_bench0000",
                                value=b"sk-bench")  # fmt: skip

    def applies(self, name: str) -> bool:
        return self.on and name == "echo.test"

    async def server_context(self, name: str) -> ssl.SSLContext:
        return await self.minter.context(name)

    def injections(self) -> list[Injection]:
        return [self.secret]


def tls(ns: str, cafile: Path, n: int) -> dict[str, object]:
    argv = ["ip", "netns", "exec", ns, sys.executable, TLS_CLIENT, GATEWAY_IP, str(TLS_PORT),
            "echo.test", str(cafile), str(n)]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900)
    result: dict[str, object] = json.loads(out.stdout)
    return result


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
    bench = Bench(internet.ca, on=False)
    gateway = EgressGateway(Resolver((DNS, 53)), intercepts=lambda _c: bench)
    try:
        ns = (await network.ensure("c1")).netns or ""
        await gateway.start("c1", ns, Policy.of(["allowed.test", "echo.test"]))
        proxied = await asyncio.to_thread(
            client, ["ip", "netns", "exec", ns], GATEWAY_IP, HTTP_PORT, GATEWAY_IP, n
        )
        direct = await asyncio.to_thread(client, [], ALLOWED, 80, DNS, n)
        both = folder / "both.pem"  # the guest trusts the test CA and the org's
        both.write_bytes(internet.ca.read_bytes() + bench.minter.ca_pem)
        passthrough = await asyncio.to_thread(tls, ns, both, n)
        bench.on = True
        intercepted = await asyncio.to_thread(tls, ns, both, n)
        injected = [r for r in internet.echoed() if ("Authorization", "Bearer sk-bench") in
                    [tuple(h) for h in r["headers"]]]  # type: ignore[union-attr]  # fmt: skip
        assert len(injected) >= 2 * n, "the intercepted requests were not injected"
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
    print(f"\nHTTPS to echo.test through the proxy, {n} requests each: injected vs passed through")
    for label, key in (("new connection a request", "fresh"), ("kept-alive connection", "kept")):
        i, p = intercepted[key], passthrough[key]
        assert isinstance(i, list) and isinstance(p, list)
        print(summary(f"HTTPS, {label}, intercepted", i))
        print(summary(f"HTTPS, {label}, passthrough", p))
        print(f"{'ratio intercepted / passthrough (median)':<44} "
              f"{statistics.median(i) / statistics.median(p):.2f}x")  # fmt: skip
    ti, tpass = float(str(intercepted["throughput"])), float(str(passthrough["throughput"]))
    print(f"{'64 MiB HTTPS download, intercepted':<44} {ti:9.1f} MiB/s")
    print(f"{'64 MiB HTTPS download, passthrough':<44} {tpass:9.1f} MiB/s")
    print(f"{'ratio intercepted / passthrough':<44} {ti / tpass:.2f}x")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
