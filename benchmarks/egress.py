"""Egress through Sanbox's proxy against the same requests direct, in one run, as ratios: HTTP
request latency, download throughput, and DNS filter latency against the upstream resolver; then
HTTPS to one host direct, passed through the proxy, and intercepted with a secret injected
(request latency on new and on kept-alive connections, a 64 MiB download). Each proxied figure
twice: with checked bytes relayed in the kernel (splice, the default) and through Python (the
path before it, `kernel=False`), from two computers' namespaces; every way in `ROUNDS` rounds,
in a new order each round. Runs against the test
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
from typing import cast

from _common import summary

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.internet import ALLOWED, DNS, ECHO, Internet  # noqa: E402

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
        self.secret = Injection(
            hosts=("echo.test",),
            header=b"Authorization",
            template=b"Bearer {value}",
            placeholder=b"sbx_ph_bench0000",
            value=b"sk-bench",
        )

    def applies(self, name: str) -> bool:
        return self.on and name == "echo.test"

    async def server_context(self, name: str) -> ssl.SSLContext:
        return await self.minter.context(name)

    def injections(self) -> list[Injection]:
        return [self.secret]

    def handover(self) -> None:
        return None  # no other host takes this proxy over


def tls(prefix: list[str], host: str, port: int, cafile: Path, n: int) -> dict[str, object]:
    argv = [*prefix, sys.executable, TLS_CLIENT, host, str(port), "echo.test", str(cafile), str(n)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def client(prefix: list[str], host: str, port: int, dns: str, n: int) -> dict[str, object]:
    argv = [*prefix, sys.executable, CLIENT, host, str(port), "allowed.test", dns, str(n)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, object] = json.loads(out.stdout)
    return result


ROUNDS = 4  # each way measured in turns, in a new order each round: none is always first


def merged(into: dict[str, object], run: dict[str, object]) -> None:
    """A client's figures added to those of its way's earlier rounds (lists of each)."""
    for key, value in run.items():
        got = into.setdefault(key, [])
        assert isinstance(got, list)
        got.extend(value if isinstance(value, list) else [value])


async def main(n: int) -> None:
    internet = Internet.start()
    folder = Path(tempfile.mkdtemp(prefix="sbbench"))
    network = Network(folder, "bench")
    bench = Bench(internet.ca, on=False)
    gateways = {
        kernel: EgressGateway(Resolver((DNS, 53)), intercepts=lambda _c: bench, kernel=kernel)
        for kernel in (True, False)
    }
    http: dict[str, dict[str, object]] = {}
    https: dict[str, dict[str, object]] = {}
    per_round = max(1, n // ROUNDS)
    try:
        both = folder / "both.pem"  # the guest trusts the test CA and the org's
        both.write_bytes(internet.ca.read_bytes() + bench.minter.ca_pem)
        prefixes: dict[str, list[str]] = {}
        for kernel, gateway in gateways.items():
            (folder / f"c{int(kernel)}").mkdir()
            ns = (await network.ensure(f"c{int(kernel)}")).netns or ""
            await gateway.start(f"c{int(kernel)}", ns, Policy.of(["allowed.test", "echo.test"]))
            prefixes["kernel" if kernel else "python"] = ["ip", "netns", "exec", ns]
        ways = ["kernel", "python", "direct"]
        for turn in range(ROUNDS):
            for side in ways[turn % 3 :] + ways[: turn % 3]:
                if side == "direct":
                    h = await asyncio.to_thread(client, [], ALLOWED, 80, DNS, per_round)
                    t = await asyncio.to_thread(tls, [], ECHO, 443, both, per_round)
                else:
                    pre = prefixes[side]
                    h = await asyncio.to_thread(
                        client, pre, GATEWAY_IP, HTTP_PORT, GATEWAY_IP, per_round
                    )
                    t = await asyncio.to_thread(tls, pre, GATEWAY_IP, TLS_PORT, both, per_round)
                merged(http.setdefault(side, {}), h)
                merged(https.setdefault(side, {}), t)
                if side == "kernel":
                    bench.on = True
                    t = await asyncio.to_thread(tls, pre, GATEWAY_IP, TLS_PORT, both, per_round)
                    merged(https.setdefault("intercepted", {}), t)
                    bench.on = False
        wanted = ["Authorization", "Bearer sk-bench"]
        injected = [r for r in internet.echoed() if wanted in cast(list[object], r["headers"])]
        assert len(injected) >= 2 * per_round * ROUNDS, "the intercepted requests were not injected"
    finally:
        for gateway in gateways.values():
            await gateway.close()
        for kernel in gateways:
            await network.remove(f"c{int(kernel)}")
        internet.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"{per_round * ROUNDS} requests and DNS queries each, in {ROUNDS} rounds (each way in "
        "turn, a new order each round); client inside the computer's namespace"
    )
    print("through Sanbox: checked bytes relayed in the kernel (splice) | through Python (before)")
    report(http, "HTTP request", "latency", "64 MiB download")
    p, d = http["kernel"]["dns"], http["direct"]["dns"]
    assert isinstance(p, list) and isinstance(d, list)
    print(summary("DNS query, through the filter", p))
    print(summary("DNS query, upstream direct", d))
    ratio = statistics.median(p) / statistics.median(d)
    print(f"{'ratio filter / upstream (median)':<44} {ratio:.2f}x")
    print(f"\nHTTPS to echo.test, {per_round * ROUNDS} requests each")
    report(https, "HTTPS, new connection a request", "fresh", "64 MiB HTTPS download")
    report(https, "HTTPS, kept-alive connection", "kept", None)
    for label, key in (("new connection a request", "fresh"), ("kept-alive connection", "kept")):
        i, k = https["intercepted"][key], https["kernel"][key]
        assert isinstance(i, list) and isinstance(k, list)
        print(summary(f"HTTPS, {label}, intercepted", i))
        print(
            f"{'ratio intercepted / passthrough (median)':<44} "
            f"{statistics.median(i) / statistics.median(k):.2f}x"
        )
    ti, tk = throughput(https["intercepted"]), throughput(https["kernel"])
    print(f"{'64 MiB HTTPS download, intercepted':<44} {ti:9.1f} MiB/s")
    print(f"{'ratio intercepted / passthrough':<44} {ti / tk:.2f}x")


def throughput(run: dict[str, object]) -> float:
    """The median of a way's downloads (MiB/s), several a round."""
    values = run["throughput"]
    assert isinstance(values, list)
    return float(statistics.median(values))


def report(runs: dict[str, dict[str, object]], label: str, key: str, download: str | None) -> None:
    """Latency medians and the download of the kernel's relay, Python's and direct, as ratios
    to direct."""
    d = runs["direct"][key]
    assert isinstance(d, list)
    for side in ("kernel", "python"):
        xs = runs[side][key]
        assert isinstance(xs, list)
        print(summary(f"{label}, through Sanbox ({side})", xs))
    print(summary(f"{label}, direct", d))
    for side in ("kernel", "python"):
        xs = runs[side][key]
        assert isinstance(xs, list)
        ratio = statistics.median(xs) / statistics.median(d)
        print(f"{f'ratio through ({side}) / direct, median':<44} {ratio:.2f}x")
    if download is None:
        return
    direct = throughput(runs["direct"])
    for side in ("kernel", "python"):
        through = throughput(runs[side])
        print(
            f"{f'{download}, through ({side})':<44} {through:9.1f} MiB/s   "
            f"{through / direct:.2f}x direct"
        )
    print(f"{f'{download}, direct':<44} {direct:9.1f} MiB/s")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
