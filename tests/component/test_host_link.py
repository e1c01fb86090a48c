"""A host reached over the network: a real host agent (`fleet.link.serve`, uvicorn and the agent
tunnel over mutual TLS with the fleet's two CAs) in front of a host on the local driver, and the
control plane's `RemoteHost` calling it through the `Host` protocol: a computer created, its
guest agent reached through the tunnel, stopped, started again and destroyed; an operation id
sent twice runs once; neither side accepts the other's certificate in its own place; a host that
is gone answers `host_unreachable` within seconds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509

from sanbox import Sanbox, pki
from sanbox.fleet.link import serve as link_serve
from sanbox.fleet.link.agent import OPERATION, HostAgent
from sanbox.fleet.link.link import HostUnreachableError
from sanbox.fleet.link.pki import FleetCAs, Identity, client_tls, fingerprint, host_identity
from sanbox.fleet.link.remote import RemoteHost
from sanbox.fleet.link.serve import serve
from sanbox.fleet.link.vm import RemoteVm
from sanbox.host.data.layout import DataDir
from sanbox.host.door import AgentRouteError, Host, HostError, Image, MachineSpec
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk.fleet import FleetHost
from tests.conftest import free_port

from .conftest import LiveServer, fake_image, local_app, served

pytestmark = pytest.mark.component


def _free_port() -> int:
    return free_port()


@dataclass
class Agent:
    url: str
    tunnel: tuple[str, int]
    control: Identity
    cas: FleetCAs
    data_dir: DataDir
    stop: threading.Event


@contextlib.contextmanager
def _serving(agent: HostAgent, port: int, me: Identity) -> Iterator[threading.Event]:
    """The host agent served on `port` (its tunnel on the next) in a thread; set the event (or
    leave the block) to stop it."""
    stop = threading.Event()

    def run() -> None:
        async def main() -> None:
            done = asyncio.Event()
            loop = asyncio.get_running_loop()
            threading.Thread(
                target=lambda: (stop.wait(), loop.call_soon_threadsafe(done.set)), daemon=True
            ).start()
            await serve(agent, "127.0.0.1", port, port + 1, me, done)

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(15)


def signed_host(cas: FleetCAs, dd: DataDir, name: str = "h1") -> Identity:
    """A host's files as `sanbox host join` leaves them: its key, its certificate signed by the
    fleet's host CA for 127.0.0.1, and the control CA's certificate."""
    me = host_identity(dd.host / "fleet")
    me.cert.parent.mkdir(parents=True)
    key = pki.new_key()
    cert, control_ca = cas.sign_host(name, ["127.0.0.1"], key.public_key())
    pki.write_key(me.key, key)
    pki.write_cert(me.cert, cert)
    me.peer_ca.write_bytes(control_ca.read_bytes())
    return me


@pytest.fixture
def host_agent(short_tmp: Path) -> Iterator[Agent]:
    cas = FleetCAs(short_tmp / "control" / "fleet")
    dd = DataDir(short_tmp / "host")
    dd.ensure()
    fake_image(dd)
    me = signed_host(cas, dd)
    port = _free_port()
    agent = HostAgent(HostRuntime(dd, LocalDriver(), networking=False))
    url = f"https://127.0.0.1:{port}"
    control = cas.control_identity()
    with _serving(agent, port, me) as stop:
        _wait_until_up(url, control)
        yield Agent(url, ("127.0.0.1", port + 1), control, cas, dd, stop)


def _wait_until_up(url: str, control: Identity) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{url}/v1/host/report", verify=client_tls(control), timeout=2)
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the host agent did not start"
            time.sleep(0.05)


def _remote(agent: Agent) -> RemoteHost:
    return RemoteHost("h1", agent.url, agent.tunnel, client_tls(agent.control))


def test_a_computer_lives_its_life_through_a_remote_host(host_agent: Agent) -> None:
    async def life() -> None:
        remote = _remote(host_agent)
        host: Host = remote  # the door, over the network
        await remote.open()
        try:
            assert host.driver_facts() == ("local", "local-process")
            assert host.storage()[0] == str(host_agent.data_dir.root)
            image = host.image("base")
            spec = MachineSpec(computer_id="cmpremote1", hostname="remote-one")
            machine, disk = await host.create(spec, image)
            assert disk.size_bytes > 0
            assert machine.vm.alive() and machine.isolation == "local-process"
            r = await machine.agent.exec(["sh", "-c", "echo through the tunnel"])
            assert (r.exit_code, r.stdout) == (0, b"through the tunnel\n")
            assert "cmpremote1" in list(remote.computers())
            await machine.agent.close()  # closed: the next client() dials the tunnel again
            client = await machine.client()
            assert (await client.exec(["true"])).exit_code == 0

            await host.shutdown(machine)
            assert host.attach_vm("cmpremote1") is None
            again = await host.start(spec, image)
            assert (await again.agent.exec(["true"])).exit_code == 0
            assert isinstance(await host.console_lines("cmpremote1", 10), list)
            await again.agent.close()
            await host.destroy("cmpremote1")
            assert "cmpremote1" not in list(remote.computers())
            assert not (host_agent.data_dir.computers / "cmpremote1").exists()
        finally:
            await remote.close()

    asyncio.run(life())


def test_an_operation_id_sent_twice_runs_once(host_agent: Agent) -> None:
    tls = client_tls(host_agent.control)
    build = host_agent.data_dir.images / "base"
    build_id = next(build.iterdir()).name
    body = {
        "spec": {
            "computer_id": "cmptwice",
            "vcpus": 1,
            "memory_mib": 256,
            "disk_gib": None,
            "hostname": "twice",
        },
        "image": {
            "template": "base",
            "build_id": build_id,
            "path": "/nowhere",
            "kernel_release": "test",
            "disk_size_gib": 1,
        },
    }
    with httpx.Client(verify=tls, timeout=60) as http:
        url = f"{host_agent.url}/v1/host/calls/create"
        first = http.post(url, json=body, headers={OPERATION: "op-twice-0001"})
        second = http.post(url, json=body, headers={OPERATION: "op-twice-0001"})
        other = http.post(url, json=body, headers={OPERATION: "op-twice-0002"})
        assert first.status_code == 200, first.text
        assert second.json() == first.json()  # the journal's answer: not run again
        assert other.status_code == 409  # a new operation: its folder exists already
        assert other.json()["error"]["type"] == "HostError"
        assert http.post(url, json=body).status_code == 400  # no operation id
        http.post(
            f"{host_agent.url}/v1/host/calls/destroy",
            json={"computer_id": "cmptwice"},
            headers={OPERATION: "op-twice-0003"},
        )


def test_neither_side_takes_the_others_certificate(host_agent: Agent, short_tmp: Path) -> None:
    # a host's certificate (signed by the host CA) is no client certificate for another host
    impostor = short_tmp / "impostor"
    impostor.mkdir()
    key = pki.new_key()
    cert, _ = host_agent.cas.sign_host("h2", ["127.0.0.1"], key.public_key())
    pki.write_key(impostor / "h2.key", key)
    pki.write_cert(impostor / "h2.pem", cert)
    as_host = client_tls(
        Identity(impostor / "h2.pem", impostor / "h2.key", host_agent.control.peer_ca)
    )
    no_cert = ssl.create_default_context(cafile=str(host_agent.control.peer_ca))
    for tls in (as_host, no_cert):
        with pytest.raises((httpx.HTTPError, ssl.SSLError)):
            httpx.get(f"{host_agent.url}/v1/host/report", verify=tls, timeout=5).raise_for_status()
    # and the control plane trusts no server the control CA signed (a control node posing as
    # a host): its own certificate's CA is not the hosts' CA
    cas = host_agent.cas
    wrong = ssl.create_default_context(cafile=str(cas.folder / "control-ca.pem"))
    wrong.load_cert_chain(str(host_agent.control.cert), str(host_agent.control.key))
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{host_agent.url}/v1/host/report", verify=wrong, timeout=5)


def _legacy_host(cas: FleetCAs, folder: Path) -> Identity:
    """A host's files as a join before migration 0023 left them: its certificate carries its
    address only, not its `identity_name`."""
    me = host_identity(folder)
    folder.mkdir(parents=True)
    key = pki.new_key()
    cert = pki.sign(cas.host_ca(), key.public_key(), "sanbox host h1", ["127.0.0.1"], pki.SERVER)
    pki.write_key(me.key, key)
    pki.write_cert(me.cert, cert)
    me.peer_ca.write_bytes((cas.folder / "control-ca.pem").read_bytes())
    return me


def test_a_host_is_known_by_its_own_name_not_by_an_address(
    host_agent: Agent, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every host's certificate is signed by the one host CA, and any host may ask for any
    address: a link to host h2 dialling h1's address (a host that answers there in its place)
    is refused, its calls and its guests' tunnel alike, before a byte is sent; h1 is taken. A
    host that joined before its name was signed is checked by its address, as then, and only
    when its record says so. No proxy of the environment is taken (through one, the name would
    go unchecked)."""

    async def links() -> None:
        tls = client_tls(host_agent.control)
        impostor = RemoteHost("h2", host_agent.url, host_agent.tunnel, tls)
        try:
            with pytest.raises(HostUnreachableError):
                await impostor.refresh()
            with pytest.raises(AgentRouteError):
                await RemoteVm(impostor, "cmpnone", "process").dial_agent()
        finally:
            await impostor.close()
        own = RemoteHost("h1", host_agent.url, host_agent.tunnel, tls)
        try:
            assert "computers" in await own.refresh()
        finally:
            await own.close()

    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):  # one that is not there
        monkeypatch.setenv(proxy, f"http://127.0.0.1:{_free_port()}")
    asyncio.run(links())
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy)
    # a certificate from before 0023 (its address alone): refused where the name is checked
    legacy = _legacy_host(host_agent.cas, short_tmp / "legacy" / "fleet")
    dd = DataDir(short_tmp / "legacy-host")
    dd.ensure()
    port = _free_port()
    with _serving(HostAgent(HostRuntime(dd, LocalDriver(), networking=False)), port, legacy):
        url = f"https://127.0.0.1:{port}"
        _wait_until_up(url, host_agent.control)

        async def by(identity: bool) -> None:
            tls = client_tls(host_agent.control)
            link = RemoteHost("h1", url, ("127.0.0.1", port + 1), tls, by_identity=identity)
            try:
                await link.refresh()
            finally:
                await link.close()

        with pytest.raises(HostUnreachableError):
            asyncio.run(by(True))
        asyncio.run(by(False))


def test_a_certificate_of_an_earlier_join_is_refused(host_agent: Agent) -> None:
    """A host's record pins the last certificate signed for it: the agent showing one signed for
    the same host by the same CA before (a stolen key's, as the host joined again since) is
    refused by the calls, the blocking call and the guests' tunnel alike; the current one is
    taken."""
    served = x509.load_pem_x509_certificate(host_agent_cert(host_agent).read_bytes())
    rejoined, _ = host_agent.cas.sign_host("h1", ["127.0.0.1"], pki.new_key().public_key())
    image = Image("base", "build0", Path("/nowhere"), "6.1", 1)

    async def pinned_to(pin: str) -> RemoteHost:
        tls = client_tls(host_agent.control, pin)
        return RemoteHost("h1", host_agent.url, host_agent.tunnel, tls, pinned=pin)

    async def links() -> None:
        stale = await pinned_to(fingerprint(rejoined))
        try:
            with pytest.raises(HostUnreachableError, match="an earlier join"):
                await stale.refresh()
            with pytest.raises(AgentRouteError, match="an earlier join"):
                await RemoteVm(stale, "cmpnone", "process").dial_agent()
            with pytest.raises(httpx.ConnectError, match="an earlier join"):
                await asyncio.to_thread(stale.remove_build, image)
        finally:
            await stale.close()
        current = await pinned_to(fingerprint(served))
        try:
            assert "computers" in await current.refresh()
            with pytest.raises(HostError, match="build0"):  # answered by the host itself
                await asyncio.to_thread(current.remove_build, image)
        finally:
            await current.close()

    asyncio.run(links())


def test_a_tunnel_dialled_as_its_link_is_bound_again_is_not_kept(
    host_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that joins again revokes its certificate: a tunnel whose handshake was under way
    with the old one when the link was bound again is closed, not counted among the link's."""
    dialled = asyncio.open_connection

    async def link() -> None:
        remote = _remote(host_agent)

        async def then_rebound(*args: Any, **kwargs: Any) -> Any:
            streams = await dialled(*args, **kwargs)
            tls = client_tls(host_agent.control)
            await remote.rebind(remote.url, remote.tunnel, tls, by_identity=True, pinned=None)
            return streams

        monkeypatch.setattr(asyncio, "open_connection", then_rebound)
        try:
            with pytest.raises(AgentRouteError, match="joined again"):
                await RemoteVm(remote, "cmpnone", "process").dial_agent()
            assert not remote._tunnels
        finally:
            await remote.close()

    asyncio.run(link())


def host_agent_cert(agent: Agent) -> Path:
    return host_identity(agent.data_dir.host / "fleet").cert


def test_a_host_that_is_gone_is_unreachable_within_seconds(host_agent: Agent) -> None:
    async def gone() -> None:
        remote = _remote(host_agent)
        await remote.open()
        try:
            host_agent.stop.set()
            deadline = time.monotonic() + 15
            while True:  # until its listener has closed
                try:
                    await remote.refresh()
                except HostUnreachableError:
                    break
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            while True:  # a keep-alive connection the agent still drains may serve one more
                started = time.monotonic()
                try:
                    await remote.call("kill", computer_id="cmpnone")
                except HostUnreachableError as raised:
                    assert time.monotonic() - started < 2.5
                    assert raised.code == "host_unreachable"
                    break
                assert time.monotonic() < deadline, "calls still answered by a stopped agent"
                await asyncio.sleep(0.05)
        finally:
            await remote.close()

    asyncio.run(gone())


BIN = Path(sys.executable).parent / "sanbox"


def _sanbox(live: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SANBOX_URL": live.url,
        "SANBOX_API_KEY": live.key,
        "PYTHONPATH": str(Path(__file__).parents[2] / "src"),
    }
    return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=60)


def join_host(
    live: LiveServer,
    host_dir: Path,
    port: int,
    name: str = "h1",
    region: str = "eu-1",
    address: str = "127.0.0.1",
) -> None:
    """`sanbox host token` then `sanbox host join`, as an operator does: the host's files in
    `host_dir`, its calls on `address:port` (the tunnel on the next port)."""
    token = _sanbox(live, "host", "token", "--region", region, "--host", name).stdout.strip()
    who = ["--server", live.url, "--token", token, "--name", name, "--region", region]
    where = ["--address", address, "--port", str(port), "--data-dir", str(host_dir)]
    joined = _sanbox(live, "host", "join", *who, *where)
    assert joined.returncode == 0, joined.stderr


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    """The real app with short host leases: a host that misses 1 s is suspect, 2 s lost."""
    yield from serving_fleet(short_tmp, lease=1.0, lost_after=2.0)


def serving_fleet(
    short_tmp: Path, lease: float, lost_after: float, **more: Any
) -> Iterator[LiveServer]:
    """The real app on the local driver, watching its hosts every 0.2 s with these leases (and
    `more` of its settings)."""
    app, dd = local_app(short_tmp, host_lease=lease, host_lost_after=lost_after, **more)
    with served(app) as url:
        yield LiveServer(url, app.state.first_key, dd)


def _hosts(live: LiveServer) -> list[FleetHost]:
    with Sanbox(live.url, live.key) as client:
        return list(client.fleet.hosts())


def _until(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.1)


def test_a_host_joins_with_a_one_time_token_and_its_lease_follows_it(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    made = _sanbox(live, "host", "token", "--region", "eu-1", "--ttl", "10m")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("sbj_")
    host_dir = short_tmp / "joined"
    port = _free_port()
    join = (
        "host",
        "join",
        "--server",
        live.url,
        "--token",
        token,
        "--name",
        "h1",
        "--address",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(host_dir),
    )
    wrong_region = _sanbox(live, *join, "--region", "us-1")
    assert wrong_region.returncode == 1 and "join_refused" in wrong_region.stderr
    assert len(wrong_region.stderr.strip().splitlines()) == 1
    assert not (host_dir / "host" / "fleet" / "host.pem").exists()  # nothing written
    joined = _sanbox(live, *join, "--region", "eu-1")
    assert joined.returncode == 0, joined.stderr
    assert "joined as h1" in joined.stdout and "eu-1" in joined.stdout
    again = _sanbox(live, *join, "--region", "eu-1")
    assert again.returncode == 1 and "join_refused" in again.stderr  # used once
    assert "unknown, used, expired" in again.stderr
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        used = db.execute("SELECT host_name, used_at IS NOT NULL FROM join_tokens").fetchall()
    assert used == [("h1", 1)]
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:  # its name is checked
        assert db.execute("SELECT identity_bound FROM hosts").fetchall() == [(1,)]
    [h1] = _hosts(live)
    assert (h1.name, h1.region, h1.address, h1.epoch) == ("h1", "eu-1", f"127.0.0.1:{port}", 1)
    # a token for a new host does not take a known host's name (its address, and the secrets
    # its computers' egress is handed, would go where the joiner says); one made for another
    # host admits that host only
    taker = [a if a != str(host_dir) else str(short_tmp / "taker") for a in join]
    for minted, said in (
        (("--region", "eu-1"), "known already"),
        (("--region", "eu-1", "--host", "h2"), "for host h2, not h1"),
    ):
        fresh = _sanbox(live, "host", "token", *minted).stdout.strip()
        taken = _sanbox(live, *[fresh if a == token else a for a in taker], "--region", "eu-1")
        assert taken.returncode == 1 and "join_refused" in taken.stderr, taken.stderr
        assert said in taken.stderr, taken.stderr
    assert [(h.address, h.epoch) for h in _hosts(live)] == [(f"127.0.0.1:{port}", 1)]
    me = host_identity(DataDir(host_dir).host / "fleet")
    assert oct(me.key.stat().st_mode & 0o777) == "0o600"

    # served with the certificates it got: the control plane reads its reports (its client
    # certificate from the same CAs) and renews its lease; silent, it is suspect, then lost;
    # a host agent started again registers again, with a new epoch
    def runtime() -> HostRuntime:
        return HostRuntime(DataDir(host_dir), LocalDriver(), networking=False)

    with _serving(HostAgent(runtime()), port, me):
        _wait_until_up(
            f"https://127.0.0.1:{port}", FleetCAs(live.data_dir.root / "fleet").control_identity()
        )
        first = _hosts(live)[0].lease_until
        _until("renewed", lambda: _hosts(live)[0].lease_until != first)
        assert _hosts(live)[0].state == "up"
        listed = _sanbox(live, "host", "ls")
        assert listed.returncode == 0 and "h1" in listed.stdout and "up" in listed.stdout
    _until("suspect", lambda: _hosts(live)[0].state in ("suspect", "lost"))
    _until("lost", lambda: _hosts(live)[0].state == "lost")
    with _serving(HostAgent(runtime()), port, me):
        _until("back", lambda: _hosts(live)[0].state == "up")
        assert _hosts(live)[0].epoch > 1
        # an operator drains it (nothing new placed), looks, and undrains it
        drained = _sanbox(live, "host", "drain", "h1")
        assert drained.returncode == 0 and "draining" in drained.stdout, drained.stderr
        got = _sanbox(live, "host", "get", "h1")
        assert got.returncode == 0 and "draining" in got.stdout and "eu-1" in got.stdout
        assert _sanbox(live, "host", "drain", "h1", "--undo").returncode == 0
        assert _hosts(live)[0].state == "up"
        early = _sanbox(live, "host", "forget", "h1", "--confirm-dead")
        assert early.returncode == 1 and "host_not_lost" in early.stderr  # it answers: not dead
    # gone for good: forgotten on the operator's word, and only with it
    _until("lost again", lambda: _hosts(live)[0].state == "lost")
    unsure = _sanbox(live, "host", "forget", "h1")
    assert unsure.returncode == 1 and "confirmation_required" in unsure.stderr
    assert len(unsure.stderr.strip().splitlines()) == 1
    forgot = _sanbox(live, "host", "forget", "h1", "--confirm-dead")
    assert forgot.returncode == 0 and "retired" in forgot.stdout, forgot.stderr
    assert _hosts(live)[0].state == "retired"
    missing = _sanbox(live, "host", "get", "h9")
    assert missing.returncode == 1 and "host_not_found" in missing.stderr


def test_a_host_asks_for_no_name_that_is_not_its_own(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    """A wildcard (it would match every name under it) or a host's identity name (another host's,
    or its own twice) as an address is refused, the token kept and nothing written."""
    live = fleet_server
    token = _sanbox(live, "host", "token", "--region", "eu-1").stdout.strip()
    for address in ("*.example.com", "h9.hosts.sanbox.invalid", "H9.Hosts.Sanbox.Invalid."):
        host_dir = short_tmp / "asks"
        who = ["--server", live.url, "--token", token, "--name", "h1", "--region", "eu-1"]
        where = ["--address", address, "--port", "7443", "--data-dir", str(host_dir)]
        refused = _sanbox(live, "host", "join", *who, *where)
        assert refused.returncode == 1 and "invalid_addresses" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert not (host_dir / "host" / "fleet" / "host.pem").exists()
    assert _hosts(live) == []
    where = ["--address", "127.0.0.1", "--port", "7443", "--data-dir", str(short_tmp / "h1")]
    joined = _sanbox(live, "host", "join", *who, *where)  # the token was not spent
    assert joined.returncode == 0, joined.stderr
    assert [h.name for h in _hosts(live)] == ["h1"]
    # another host on h1's machine may ask for its address (h1 is checked by its name) unless
    # h1 joined before names were signed: then it is checked by that address
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        db.execute("UPDATE hosts SET identity_bound = 0")
    token = _sanbox(live, "host", "token", "--region", "eu-1").stdout.strip()
    who = ["--server", live.url, "--token", token, "--name", "h2", "--region", "eu-1"]
    where = ["--address", "127.0.0.1", "--port", "7445", "--data-dir", str(short_tmp / "h2")]
    refused = _sanbox(live, "host", "join", *who, *where)
    assert refused.returncode == 1 and "invalid_addresses" in refused.stderr, refused.stderr
    assert "host h1's address" in refused.stderr
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        db.execute("UPDATE hosts SET identity_bound = 1")
    joined = _sanbox(live, "host", "join", *who, *where)
    assert joined.returncode == 0, joined.stderr


def test_a_host_that_joined_again_is_taken_with_its_new_certificate_only(
    fleet_server: LiveServer, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control plane pins the last certificate it signed for a host. h1's key is stolen; h1
    joins again while its agent serves: the agent takes its new certificate without a restart
    and its lease goes on, while an agent serving the stolen first certificate renews none (the
    control plane refuses it as the handshake ends: h1 is lost)."""
    monkeypatch.setattr(link_serve, "RELOAD_EVERY", 0.1)
    live = fleet_server
    port = _free_port()
    folder, stolen = short_tmp / "h1", short_tmp / "stolen"
    join_host(live, folder, port)
    me = host_identity(DataDir(folder).host / "fleet")
    thief = host_identity(DataDir(stolen).host / "fleet")
    thief.cert.parent.mkdir(parents=True)
    for mine, taken in ((me.cert, thief.cert), (me.key, thief.key), (me.peer_ca, thief.peer_ca)):
        taken.write_bytes(mine.read_bytes())
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()

    def serving(who: Identity, at: Path) -> contextlib.AbstractContextManager[threading.Event]:
        return _serving(HostAgent(HostRuntime(DataDir(at), LocalDriver(), False)), port, who)

    with serving(me, folder):
        joined = _hosts(live)[0].lease_until
        _until("renewed", lambda: _hosts(live)[0].lease_until != joined)
        join_host(live, folder, port)  # again, while it serves
        pinned = fingerprint(x509.load_pem_x509_certificate(me.cert.read_bytes()))
        with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
            assert db.execute("SELECT cert_sha256 FROM hosts").fetchall() == [(pinned,)]
        again = _hosts(live)[0].lease_until
        _until("renewed again", lambda: _hosts(live)[0].lease_until != again)
        assert _hosts(live)[0].state == "up"
    with serving(thief, stolen):
        _wait_until_up(f"https://127.0.0.1:{port}", control)  # it serves (the CA signed it)
        _until("lost", lambda: _hosts(live)[0].state == "lost")  # no report renewed it
    with serving(me, folder):
        _until("up", lambda: _hosts(live)[0].state == "up")
