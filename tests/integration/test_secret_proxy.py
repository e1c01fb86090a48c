"""The secret proxy in a real namespace with real nftables, against the test internet's HTTPS
echo: curl inside the computer's namespace (where the guest would be) reaches echo.test with the
secret's value in place of the placeholder, while a host with no secret keeps passthrough (the
real certificate, the placeholder unchanged); an upstream nobody trusts is refused; a secret
removed stops at the next connection."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

import pytest

from sanbox.host.egress.denials import Denial
from sanbox.host.egress.gateway import EgressGateway
from sanbox.host.egress.injection import Injection
from sanbox.host.egress.interception import Handover
from sanbox.host.egress.org_ca import Minter, new_ca, upstream_context
from sanbox.host.egress.policy import Policy
from sanbox.host.egress.resolver import Resolver
from sanbox.host.net import GATEWAY_IP, Network
from sanbox.host.net.firewall import HTTP_PORT, TLS_PORT

from ..internet import DNS, Internet

pytestmark = pytest.mark.integration

VALUE = b"sk-integration-7f3a"
PLACEHOLDER = b"sbx_ph_0123456789abcdef"


class Bound:
    """One computer's bound secret (the control plane's `ComputerInterception`, without a store)."""

    def __init__(self, internet: Internet) -> None:
        self.minter = Minter(*new_ca("itest"))
        self.upstream_context = upstream_context(internet.ca)
        self.strict_placeholders = False
        self.secrets = [
            Injection(
                hosts=("echo.test", "untrusted.test"),
                header=b"Authorization",
                template=b"Bearer {value}",
                placeholder=PLACEHOLDER,
                value=VALUE,
            )
        ]

    def applies(self, name: str) -> bool:
        return any(name in s.hosts for s in self.secrets)

    async def server_context(self, name: str) -> ssl.SSLContext:
        return await self.minter.context(name, "c1")

    def injections(self) -> list[Injection]:
        return self.secrets

    def handover(self) -> Handover | None:
        return None  # for a fleet host's proxy: the proxy here never asks


def curl(ns: str, cafile: Path, host: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "ip",
        "netns",
        "exec",
        ns,
        "curl",
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        str(cafile),
        "--resolve",
        f"{host}:{TLS_PORT}:{GATEWAY_IP}",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_the_secret_proxy_in_a_real_namespace(internet: Internet) -> None:
    folder = Path(tempfile.mkdtemp(prefix="sbsec"))
    (folder / "c1").mkdir()
    bound = Bound(internet)
    trusted = folder / "trusted.pem"  # the guest trusts the org's CA and the test internet's
    trusted.write_bytes(bound.minter.ca_pem + internet.ca.read_bytes())
    denied: list[tuple[str, Denial]] = []
    auth = f"Authorization: Bearer {PLACEHOLDER.decode()}"

    async def scenario() -> None:
        network = Network(folder, "stest")
        ns = (await network.ensure("c1")).netns or ""
        gateway = EgressGateway(
            Resolver((DNS, 53)), lambda *a: denied.append(a), intercepts=lambda _c: bound
        )
        try:
            rules = ["echo.test", "allowed.test", "untrusted.test"]
            await gateway.start("c1", ns, Policy.of(rules))

            def run(host: str, *args: str) -> subprocess.CompletedProcess[str]:
                return curl(ns, trusted, host, *args)

            ok = await asyncio.to_thread(
                run, "echo.test", "-H", auth, f"https://echo.test:{TLS_PORT}/one"
            )
            assert ok.returncode == 0, ok.stderr
            seen = [r for r in internet.echoed() if r["path"] == "/one"][-1]
            assert ["Authorization", f"Bearer {VALUE.decode()}"] in seen["headers"]  # type: ignore[operator]
            issuer = await asyncio.to_thread(
                run, "echo.test", "-v", "-o", "/dev/null", f"https://echo.test:{TLS_PORT}/two"
            )
            assert "Sanbox egress CA of org itest" in issuer.stderr  # the org's leaf, intercepted
            plain = await asyncio.to_thread(
                run,
                "allowed.test",
                "-v",
                "-H",
                f"X-Key: {auth}",
                f"https://allowed.test:{TLS_PORT}/pass",
            )
            assert plain.returncode == 0 and "Sanbox test CA" in plain.stderr  # passed through
            head = [h for h in internet.heads("allowed.test") if h["path"] == "/pass"][-1]
            assert PLACEHOLDER.decode() in head["head"] and VALUE.decode() not in head["head"]
            # the operator's strict mode: another host's placeholder is refused, plain HTTP too
            bound.strict_placeholders = True
            for scheme, port in (("https", TLS_PORT), ("http", HTTP_PORT)):
                url = f"{scheme}://allowed.test:{port}/leak-{scheme}"
                leak = await asyncio.to_thread(
                    curl,
                    ns,
                    trusted,
                    "allowed.test",
                    "-w",
                    " %{http_code}",
                    "-H",
                    f"X-Key: {auth}",
                    "--resolve",
                    f"allowed.test:{HTTP_PORT}:{GATEWAY_IP}",
                    url,
                )
                if scheme == "https":  # passed through: the proxy cannot see inside
                    assert leak.stdout.endswith(" 200"), leak.stdout + leak.stderr
                else:
                    assert leak.stdout.endswith(" 403") and "echo.test" in leak.stdout, leak.stdout
            clean = await asyncio.to_thread(
                curl,
                ns,
                trusted,
                "allowed.test",
                "-w",
                " %{http_code}",
                "--resolve",
                f"allowed.test:{HTTP_PORT}:{GATEWAY_IP}",
                f"http://allowed.test:{HTTP_PORT}/clean",
            )
            assert clean.stdout.endswith(" 200"), clean.stdout + clean.stderr
            paths = [h["path"] for h in internet.heads("allowed.test")]
            assert "/clean" in paths and "/leak-http" not in paths, paths
            bound.strict_placeholders = False
            bad = await asyncio.to_thread(
                run, "untrusted.test", "-w", " %{http_code}", f"https://untrusted.test:{TLS_PORT}/x"
            )
            assert bad.stdout.endswith(" 502") and "not trusted" in bad.stdout, bad.stdout
            assert VALUE.decode() not in bad.stdout
            bound.secrets = []  # removed: the next connection is passed through
            after = await asyncio.to_thread(
                run, "echo.test", "-v", "-H", auth, f"https://echo.test:{TLS_PORT}/after"
            )
            assert after.returncode == 0 and "Sanbox test CA" in after.stderr
            seen = [r for r in internet.echoed() if r["path"] == "/after"][-1]
            assert ["Authorization", f"Bearer {PLACEHOLDER.decode()}"] in seen["headers"]  # type: ignore[operator]
        finally:
            await gateway.close()
            await network.remove("c1")

    try:
        asyncio.run(scenario())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert any("untrusted.test" in d.message() for _c, d in denied), denied
    assert not any(VALUE.decode() in d.message() for _c, d in denied)
