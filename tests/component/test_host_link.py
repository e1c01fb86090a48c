"""A host reached over the network: a real host agent (`fleet.link.serve`, uvicorn and the agent
tunnel over mutual TLS with the fleet's two CAs) in front of a host on the local driver, and the
control plane's `RemoteHost` calling it through the `Host` protocol: a computer created, its
guest agent reached through the tunnel, stopped, started again and destroyed; an operation id
sent twice runs once; neither side accepts the other's certificate in its own place; a host that
is gone answers `host_unreachable` within seconds."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sanbox import pki
from sanbox.fleet.link.agent import OPERATION, HostAgent
from sanbox.fleet.link.pki import FleetCAs, Identity, client_tls, host_identity
from sanbox.fleet.link.remote import HostUnreachableError, RemoteHost
from sanbox.fleet.link.serve import serve
from sanbox.host.data.layout import DataDir
from sanbox.host.door import Host, MachineSpec
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from .conftest import fake_image

pytestmark = pytest.mark.component


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Agent:
    url: str
    tunnel: tuple[str, int]
    control: Identity
    cas: FleetCAs
    data_dir: DataDir
    stop: threading.Event


@pytest.fixture
def host_agent(short_tmp: Path) -> Iterator[Agent]:
    cas = FleetCAs(short_tmp / "control" / "fleet")
    dd = DataDir(short_tmp / "host")
    dd.ensure()
    fake_image(dd)
    me = host_identity(dd.host / "fleet")
    me.cert.parent.mkdir(parents=True)
    key = pki.new_key()
    cert, control_ca = cas.sign_host("h1", ["127.0.0.1"], key.public_key())
    pki.write_key(me.key, key)
    pki.write_cert(me.cert, cert)
    me.peer_ca.write_bytes(control_ca.read_bytes())
    port, tunnel_port = _free_port(), _free_port()
    agent = HostAgent(HostRuntime(dd, LocalDriver(), networking=False))
    stopped, started = threading.Event(), threading.Event()

    def run() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            threading.Thread(
                target=lambda: (stopped.wait(), loop.call_soon_threadsafe(stop.set)), daemon=True
            ).start()
            started.set()
            await serve(agent, "127.0.0.1", port, tunnel_port, me, stop)

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    url = f"https://127.0.0.1:{port}"
    control = cas.control_identity()
    _wait_until_up(url, control)
    try:
        yield Agent(url, ("127.0.0.1", tunnel_port), control, cas, dd, stopped)
    finally:
        stopped.set()
        thread.join(15)


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
        "spec": {"computer_id": "cmptwice", "vcpus": 1, "memory_mib": 256, "disk_gib": None,
                 "hostname": "twice"},
        "image": {"template": "base", "build_id": build_id, "path": "/nowhere",
                  "kernel_release": "test", "disk_size_gib": 1},
    }  # fmt: skip
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
        http.post(f"{host_agent.url}/v1/host/calls/destroy", json={"computer_id": "cmptwice"},
                  headers={OPERATION: "op-twice-0003"})  # fmt: skip


def test_neither_side_takes_the_others_certificate(host_agent: Agent, short_tmp: Path) -> None:
    # a host's certificate (signed by the host CA) is no client certificate for another host
    impostor = short_tmp / "impostor"
    impostor.mkdir()
    key = pki.new_key()
    cert, _ = host_agent.cas.sign_host("h2", ["127.0.0.1"], key.public_key())
    pki.write_key(impostor / "h2.key", key)
    pki.write_cert(impostor / "h2.pem", cert)
    as_host = client_tls(Identity(impostor / "h2.pem", impostor / "h2.key",
                                  host_agent.control.peer_ca))  # fmt: skip
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
            started = time.monotonic()
            with pytest.raises(HostUnreachableError) as raised:
                await remote.call("kill", computer_id="cmpnone")
            assert time.monotonic() - started < 2.5
            assert raised.value.code == "host_unreachable"
        finally:
            await remote.close()

    asyncio.run(gone())
