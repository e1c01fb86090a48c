"""Values sealed at rest, the org CA and its leaves, and the checks a secret passes before it is
stored."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path

import pytest

from sanbox.control.errors import InvalidRequestError
from sanbox.control.secret_book import header_parts, placeholder_header
from sanbox.control.secrets import check_env_name, check_header, check_hosts, check_value
from sanbox.host.egress.injection import Injection
from sanbox.host.egress.leak_scan import forms
from sanbox.host.egress.org_ca import Minter, new_ca
from sanbox.host.keys.sealing import Sealer, SealError
from sanbox.templates.spec import SpecError, parse

pytestmark = pytest.mark.unit


def test_a_sealed_value_opens_only_with_its_key_and_context(tmp_path: Path) -> None:
    sealer = Sealer(tmp_path / "secrets.key")
    assert (tmp_path / "secrets.key").stat().st_mode & 0o777 == 0o600
    blob = sealer.seal(b"sk-live-123", "secret/org_a/sec_1")
    assert b"sk-live-123" not in blob
    assert sealer.open(blob, "secret/org_a/sec_1") == b"sk-live-123"
    with pytest.raises(SealError):
        sealer.open(blob, "secret/org_b/sec_1")  # copied to another record: does not open
    with pytest.raises(SealError, match="restore the key file"):
        Sealer(tmp_path / "other.key").open(blob, "secret/org_a/sec_1")
    assert Sealer(tmp_path / "secrets.key").open(blob, "secret/org_a/sec_1") == b"sk-live-123"


def test_a_leaf_of_the_org_ca_verifies_for_its_name_only(tmp_path: Path) -> None:
    ca, key = new_ca("acme")
    assert b"PRIVATE KEY" not in ca
    minter = Minter(ca, key)
    context = asyncio.run(minter.context("echo.test"))
    assert asyncio.run(minter.context("echo.test")) is context  # kept, not re-signed
    (tmp_path / "ca.pem").write_bytes(ca)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    a, b = socket.socketpair()

    def serve() -> None:
        with context.wrap_socket(b, server_side=True) as tls:
            tls.recv(1)

    thread = threading.Thread(target=serve)
    thread.start()
    with client.wrap_socket(a, server_hostname="echo.test") as tls:
        assert tls.selected_alpn_protocol() is None  # nothing asked: nothing chosen
        tls.send(b"x")
    thread.join(5)
    a, b = socket.socketpair()
    refused = threading.Thread(target=lambda: _quietly(context, b))
    refused.start()
    with pytest.raises(ssl.SSLCertVerificationError):
        client.wrap_socket(a, server_hostname="other.test")
    a.close()
    refused.join(5)


def _quietly(context: ssl.SSLContext, sock: socket.socket) -> None:
    try:
        context.wrap_socket(sock, server_side=True)
    except (ssl.SSLError, OSError):
        pass
    finally:
        sock.close()


def test_what_a_secret_is_checked_for() -> None:
    assert check_hosts(["API.example.com", "*.example.org"]) == ["*.example.org", "api.example.com"]
    for hosts in ([], ["10.0.0.0/8:443"], ["exa mple.com"], ["*"], ["1.2.3.4"]):
        with pytest.raises(InvalidRequestError):
            check_hosts(hosts)
    assert check_header("X-Api-Key: {value}", False) == "X-Api-Key: {value}"
    assert check_header(None, True) is None
    for header in (
        "Authorization Bearer {value}",
        "Host: {value}",
        "X: no value",
        "X: {value}{value}",
        "X: {value}\r\nY: 1",
    ):
        with pytest.raises(InvalidRequestError):
            check_header(header, False)
    with pytest.raises(InvalidRequestError):
        check_header("X: {value}", True)
    assert check_header("X-Api-Key", True) == "X-Api-Key"  # where a placeholder-only one goes
    with pytest.raises(InvalidRequestError):
        check_header("Host", True)
    assert header_parts("X-Api-Key", True) == (None, b"")
    assert placeholder_header("X-Api-Key", True) == b"X-Api-Key"
    assert placeholder_header(None, True) is None
    assert check_value("sk-12345") == b"sk-12345"
    assert b"sk-12345" in forms(b"sk-12345")  # the shortest value is looked for in responses
    # shorter ones would not be (they would match ordinary text): refused, or they could return
    for value in (
        "",
        "sk-1",
        "1234567",
        "a\r\nb1234",
        "a\x00",
        "x" * 8193,
        "caf\u00e9s",
        " padded",
    ):
        with pytest.raises(InvalidRequestError) as info:
            check_value(value)
        assert value[:3] not in str(info.value) or not value[:3].strip()
    assert check_env_name("OPENAI_API_KEY") == "OPENAI_API_KEY"
    with pytest.raises(InvalidRequestError):
        check_env_name("1BAD")
    assert header_parts(None, False) == (b"Authorization", b"Bearer {value}")
    assert header_parts("X-Key: {value}", False) == (b"X-Key", b"{value}")
    assert header_parts(None, True) == (None, b"")


@pytest.mark.parametrize(
    "host",
    ["*.com", "*.io", "*.co.uk", "*.com.au", "*.github.io", "*.GitHub.IO.", "*.vercel.app"],
)
def test_a_wildcard_over_a_public_suffix_is_refused(host: str) -> None:
    with pytest.raises(InvalidRequestError, match="public suffix|every host"):
        check_hosts([host])


def test_a_wildcard_over_a_domain_of_ones_own_is_fine() -> None:
    hosts = ["*.example.com", "*.api.example.co.uk", "*.acme.github.io", "api.github.io"]
    assert check_hosts(hosts) == sorted(hosts)


def test_a_placeholder_only_secret_makes_an_injection() -> None:
    quiet = Injection(("a.test",), None, b"", b"sbx_ph_00000000", b"value-123")  # was refused
    assert quiet.placeholder_headers == frozenset({b"authorization"})


def test_a_template_binds_secrets_by_name() -> None:
    spec = parse('[secrets]\nopenai = "OPENAI_API_KEY"\nother = ""\n', "sanbox.toml")
    assert spec.secrets == {"openai": "OPENAI_API_KEY", "other": ""}
    with pytest.raises(SpecError, match="environment variable"):
        parse('[secrets]\nopenai = "1X"\n', "sanbox.toml")
    with pytest.raises(SpecError):
        parse("[secrets]\nopenai = 3\n", "sanbox.toml")
