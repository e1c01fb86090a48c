"""Egress over the link: a server with a joined fleet host (a real host agent over mutual TLS, on
the local driver, with networking: each computer gets its real namespace on the host) places a
computer there, and the host's own egress gateway, driven over the link, serves it against the
test internet. curl inside the computer's namespace (where the guest would be) reaches the
allowed host and is refused the other; the denial is recorded at the control plane (an event of
the computer); an allowlist change is applied on the host at once; a bound secret's handover
crosses and the host's proxy injects it (the namespace never holds the value); after the host
agent restarts (its gateway and the secrets held in memory gone), the control plane starts the
computer's egress there again, secrets and all, with an allowlist changed while the host was
away; more secrets bound than a host is handed turn its egress off there, the reason recorded;
a deleted computer leaves no egress behind."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.fleet.link import egress_wire as ew
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.host_egress import HostEgress
from sanbox.fleet.link.pki import FleetCAs, client_tls, host_identity
from sanbox.fleet.link.remote import RemoteHost
from sanbox.fleet.link.remote_egress import RemoteEgress
from sanbox.host.data.layout import DataDir
from sanbox.host.door import MachineSpec
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.egress.budget import ConnectionBudget
from sanbox.host.egress.denials import Denial
from sanbox.host.egress.policy import Policy
from sanbox.host.egress.reach import Reach
from sanbox.host.egress.resolver import Resolver
from sanbox.host.net import GATEWAY_IP
from sanbox.host.net.firewall import HTTP_PORT, TLS_PORT
from sanbox.host.runtime import HostRuntime

from ..component.conftest import LiveServer, fake_image
from ..component.test_host_link import (
    _free_port,
    _hosts,
    _serving,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
    signed_host,
)
from ..conftest import kill_agents
from ..internet import DNS, Internet

pytestmark = pytest.mark.integration

VALUE = "sk-fleet-egress-5d1c"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short folder (Unix socket paths) for the server and the host; whatever a failed test
    left of the host's computers (their processes, their namespaces) goes with it."""
    path = Path(tempfile.mkdtemp(prefix="sbf", dir="/tmp"))
    yield path
    kill_agents(path)
    host = DataDir(path / "h1")
    for ns in HostRuntime(host, LocalDriver()).network.namespaces():  # type: ignore[union-attr]
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=30.0, lost_after=60.0)


def _agent(host_dir: Path, internet: Internet) -> HostAgent:
    runtime = HostRuntime(DataDir(host_dir), LocalDriver())  # networking: real namespaces
    assert runtime.network is not None
    egress = HostEgress(runtime.network, Resolver((DNS, 53)), ca_bundle=internet.ca)
    return HostAgent(runtime, egress=egress)


def _curl(ns: str, *args: str, cafile: Path | None = None) -> str:
    trust = ["--cacert", str(cafile)] if cafile is not None else []
    argv = ["ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "10", *trust, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def _http(ns: str, host: str) -> str:
    return _curl(ns, "-H", f"Host: {host}", f"http://{GATEWAY_IP}:{HTTP_PORT}/")


def _org_ca(live: LiveServer, folder: Path) -> Path:
    """The org's egress CA certificate (what a guest with a bound secret trusts)."""
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        (pem,) = db.execute("SELECT cert_pem FROM org_cas").fetchone()
    path = folder / "org-ca.pem"
    path.write_text(pem)
    return path


def test_a_fleet_computer_gets_its_hosts_egress(
    fleet_server: LiveServer, short_tmp: Path, internet: Internet
) -> None:
    live = fleet_server
    host_dir = short_tmp / "h1"
    port = _free_port()
    join_host(live, host_dir, port)
    fake_image(DataDir(host_dir))
    me = host_identity(DataDir(host_dir).host / "fleet")
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    agent = _agent(host_dir, internet)
    assert agent.egress is not None
    network = agent.runtime.network
    assert network is not None
    with _serving(agent, port, me) as stop, Sanbox(live.url, live.key, timeout=60) as client:
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up with its builds", lambda: bool(_hosts(live)[0].layers))
        c = client.computers.create(name="far", idle_timeout=0, allow=["allowed.test"])
        assert (host_dir / "computers" / c.id).is_dir()
        ns = network.netns(c.id)
        assert agent.egress.gateway.policy(c.id) is not None, c.events()

        # the allowed host answers; the other is refused, and the refusal recorded here
        assert _http(ns, "allowed.test") == "hello from allowed.test\n"
        assert "not in the allowlist" in _http(ns, "blocked.test")
        _until(
            "the denial recorded at the control plane",
            lambda: any(
                e.type == "network.denied" and "blocked.test" in e.message for e in c.events()
            ),
        )

        # an allowlist change is applied on the host at once
        assert c.set_allowlist(["blocked.test"]) == 0
        assert agent.egress.gateway.policy(c.id) is not None
        assert _http(ns, "blocked.test") == "hello from blocked.test\n"
        assert "not in the allowlist" in _http(ns, "allowed.test")

        # a bound secret crosses the link; the host's proxy puts it in, the namespace sends only
        # the placeholder
        client.secrets.set("echo", VALUE, hosts=["echo.test"])
        binding = client.secrets.bind("echo", "far")
        c.set_allowlist(["echo.test"])
        _until("the host holds the secret", lambda: bool(_held(agent, c.id)))
        ca = _org_ca(live, short_tmp)
        resolve = ["--resolve", f"echo.test:{TLS_PORT}:{GATEWAY_IP}"]
        auth = ["-H", f"Authorization: Bearer {binding.placeholder}"]
        url = f"https://echo.test:{TLS_PORT}/"
        said = _curl(ns, *resolve, *auth, url, cafile=ca)
        assert VALUE not in said, "the value came back to the guest"
        echoed = internet.echoed()[-1]["headers"]
        assert ["Authorization", f"Bearer {VALUE}"] in echoed, echoed  # type: ignore[operator]

        # the host agent restarts: its gateway and what it held in memory are gone, and the
        # control plane starts the computer's egress there again, with its secret and the
        # allowlist changed while the host was away
        stop.set()
        _until("no proxy", lambda: "curl: (7)" in _curl(ns, *resolve, *auth, url, cafile=ca))
        c.set_allowlist(["echo.test", "allowed.test"])  # recorded; the host does not answer
        assert any(
            e.type == "network.error" and "applied there when the host answers" in e.message
            for e in c.events()
        ), c.events()
    again = _agent(host_dir, internet)
    assert again.egress is not None
    egress = again.egress  # as the check below reads it
    with _serving(again, port, me), Sanbox(live.url, live.key, timeout=60) as client:
        c = client.computers.get(c.id)
        _until("egress back on the host", lambda: bool(_held(again, c.id)), timeout=30)
        assert _http(ns, "allowed.test") == "hello from allowed.test\n"
        said = _curl(ns, *resolve, *auth, url, cafile=ca)
        assert ["Authorization", f"Bearer {VALUE}"] in internet.echoed()[-1]["headers"]  # type: ignore[operator]
        assert VALUE not in said

        # more secrets bound than a host is handed: its egress goes off on the host, and says why
        for n in range(ew.MAX_INJECTIONS):
            client.secrets.set(f"more{n}", VALUE, hosts=["echo.test"])
            client.secrets.bind(f"more{n}", "far")
        _until("egress off on the host", lambda: egress.gateway.policy(c.id) is None)
        assert "curl: (7)" in _curl(ns, *resolve, *auth, url, cafile=ca)
        _until(
            "the reason recorded",
            lambda: any(
                e.type == "network.error" and f"at most {ew.MAX_INJECTIONS}" in e.message
                for e in c.events()
            ),
        )

        c.delete()
        assert again.egress.gateway.policy(c.id) is None
        _until("its namespace gone", lambda: ns not in _namespaces())
    assert again.egress.report()["computers"] == {}


def _held(agent: HostAgent, computer_id: str) -> bool:
    """Whether the host's gateway runs the computer's egress with a secret handed over."""
    assert agent.egress is not None
    seen = agent.egress.report()["computers"].get(computer_id)
    return seen is not None and seen["secrets"] is not None


def _namespaces() -> str:
    return subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout


class _Unbound:
    def handover(self) -> None:
        return None


def test_remote_egress_against_a_real_host(short_tmp: Path, internet: Internet) -> None:
    """RemoteEgress straight over the link (no server): two starts of one computer at once (two
    API nodes after a host restart) both succeed on the host, one after the other; reads come
    from the report; denials are drained once; a stop leaves nothing running."""
    cas = FleetCAs(short_tmp / "control" / "fleet")
    host_dir = short_tmp / "h1"
    dd = DataDir(host_dir)
    dd.ensure()
    fake_image(dd)
    me = signed_host(cas, dd)
    port = _free_port()
    agent = _agent(host_dir, internet)
    assert agent.egress is not None and agent.runtime.network is not None
    denied: list[tuple[str, Denial]] = []
    url = f"https://127.0.0.1:{port}"
    control = cas.control_identity()

    async def scenario() -> None:
        remote = RemoteHost("h1", url, ("127.0.0.1", port + 1), client_tls(control))
        await remote.open()
        try:
            machine, _disk = await remote.create(
                MachineSpec(computer_id="cmpegress1", hostname="e1"), remote.image("base")
            )
            await machine.agent.close()
            egress = remote.open_egress(
                Resolver((DNS, 53)),
                lambda c, d: denied.append((c, d)),
                Reach(),
                512,
                lambda _c: _Unbound(),  # type: ignore[arg-type, return-value]
                ConnectionBudget(),
                lambda _c: "org_1",
            )
            assert isinstance(egress, RemoteEgress)
            policy = Policy.of(["allowed.test"])
            await asyncio.gather(
                egress.start("cmpegress1", policy), egress.start("cmpegress1", policy)
            )
            await remote.refresh()
            assert egress.policy("cmpegress1") == policy
            ns = agent.runtime.network.netns("cmpegress1")  # type: ignore[union-attr]
            ok = await asyncio.to_thread(_http, ns, "allowed.test")
            assert ok == "hello from allowed.test\n"
            no = await asyncio.to_thread(_http, ns, "blocked.test")
            assert "not in the allowlist" in no
            await remote.refresh()
            assert egress.waiting() >= 1 and (egress.carried("cmpegress1") or 0) > 0
            assert await egress.drain({"cmpegress1"}) >= 1
            assert await egress.drain({"cmpegress1"}) == 0  # taken once
            await egress.stop("cmpegress1")
            await remote.refresh()
            assert egress.running() == set()
            await remote.destroy("cmpegress1")
        finally:
            await remote.close()

    with _serving(agent, port, me):
        _wait_until_up(url, control)
        asyncio.run(scenario())
    assert [(c, d.name) for c, d in denied] == [("cmpegress1", "blocked.test")]
    assert "cmpegress1" not in _namespaces()
