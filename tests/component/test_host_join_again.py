"""A host's join whose answer was lost: the same host asks again with the same token and the
same key (the CLI keeps its key for the token until the answer came) and gets the same answer,
nothing registered or signed anew; a replay of the request changes nothing; another key is
refused, the token being used."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sanbox import pki
from sanbox.fleet.link.pki import host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.runtime import HostRuntime

from .conftest import LiveServer
from .test_host_link import _hosts, _sanbox, serving_fleet

pytestmark = pytest.mark.component


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=30.0, lost_after=60.0)


def _facts(host_dir: Path) -> tuple[str, str]:
    """The driver and acceleration `sanbox host join` says of the host at `host_dir`."""
    hypervisor, isolation = HostRuntime(DataDir(host_dir)).driver_facts()
    return hypervisor, isolation.rpartition("-")[2] if "-" in isolation else "unknown"


def _request(
    token: str, key: ec.EllipticCurvePrivateKey, port: int, facts: tuple[str, str]
) -> dict[str, object]:
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(pki.name("sanbox host h1"))
        .sign(key, hashes.SHA256())
    )
    return {
        "token": token,
        "name": "h1",
        "region": "eu-1",
        "addresses": ["127.0.0.1"],
        "port": port,
        "csr": csr.public_bytes(serialization.Encoding.PEM).decode(),
        "capacity": {"vcpus": 2, "memory_mib": 1024, "disk_bytes": 1 << 30},
        "hypervisor": facts[0],
        "accel": facts[1],
    }


def _pinned(live: LiveServer) -> list[tuple[str, int]]:
    with sqlite3.connect(live.data_dir.root / "sanbox.db") as db:
        return db.execute("SELECT cert_sha256, epoch FROM hosts").fetchall()


def test_a_join_whose_answer_was_lost_is_answered_again(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    token = _sanbox(live, "host", "token", "--region", "eu-1", "--ttl", "10m").stdout.strip()
    host_dir = short_tmp / "joined"
    fleet = DataDir(host_dir).host / "fleet"
    fleet.mkdir(parents=True, mode=0o700)
    facts = _facts(host_dir)
    # the first run: its key kept for the token, its request served, its answer lost
    pending = fleet / f"joining-{hashlib.sha256(token.encode()).hexdigest()[:16]}.key"
    key = pki.new_key()
    pki.write_key(pending, key)
    first = httpx.post(
        f"{live.url}/v1/fleet/join", json=_request(token, key, 7071, facts), timeout=30
    )
    assert first.status_code == 201, first.text
    pinned = _pinned(live)
    assert [epoch for _, epoch in pinned] == [1]

    # run again with the same token: the same key, the same answer, nothing new
    again = _sanbox(
        live,
        *("host", "join", "--server", live.url, "--token", token, "--name", "h1"),
        *("--region", "eu-1", "--address", "127.0.0.1", "--port", "7071"),
        *("--data-dir", str(host_dir)),
    )
    assert again.returncode == 0, again.stderr
    me = host_identity(fleet)
    assert me.cert.read_text() == first.json()["certificate"]
    assert me.peer_ca.read_text() == first.json()["control_ca"]
    assert pki.load_key(me.key).private_numbers() == key.private_numbers()
    assert not pending.exists()
    assert _pinned(live) == pinned  # not registered again (epoch), not revoked (certificate)

    # a replay of the request: the same public answer, nothing changed
    replay = httpx.post(
        f"{live.url}/v1/fleet/join", json=_request(token, key, 7071, facts), timeout=30
    )
    assert replay.status_code == 201 and replay.json() == first.json()
    assert _pinned(live) == pinned
    # another key, other addresses or another port's host: the token is used
    other = httpx.post(
        f"{live.url}/v1/fleet/join", json=_request(token, pki.new_key(), 7071, facts), timeout=30
    )
    assert other.status_code == 403 and other.json()["error"]["code"] == "join_refused"
    for changed in ({"addresses": ["127.0.0.2"]}, {"port": 7443}, {"hypervisor": "firecracker"}):
        moved = {**_request(token, key, 7071, facts), **changed}
        r = httpx.post(f"{live.url}/v1/fleet/join", json=moved, timeout=30)
        assert r.status_code == 403, (changed, r.text)
        assert "unknown, used, expired" in r.json()["error"]["message"]
    assert _pinned(live) == pinned and len(_hosts(live)) == 1


def test_a_refused_token_keeps_its_key_a_bad_request_does_not(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    """A token refused as unknown or used may be this key's own join still being made (an
    earlier run's, slow): its key is kept for it. A bad request took no token: nothing kept."""
    live = fleet_server
    host_dir = short_tmp / "refused"
    join = ("host", "join", "--server", live.url, "--name", "h1", "--region", "eu-1")
    r = _sanbox(
        live,
        *join,
        *("--token", "sbj_nothing", "--address", "127.0.0.1", "--data-dir", str(host_dir)),
    )
    assert r.returncode == 1 and "join_refused" in r.stderr
    kept = list((DataDir(host_dir).host / "fleet").glob("joining-*.key"))
    assert len(kept) == 1 and oct(kept[0].stat().st_mode & 0o777) == "0o600"
    r = _sanbox(
        live,
        *join,
        *("--token", "sbj_other", "--address", "*.example", "--data-dir", str(host_dir)),
    )
    assert r.returncode == 1 and "invalid_addresses" in r.stderr, r.stderr
    assert list((DataDir(host_dir).host / "fleet").glob("joining-*.key")) == kept
