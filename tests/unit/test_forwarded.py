"""X-Forwarded-For is believed only from proxies the operator trusts, and only as far as they
wrote it: the rightmost address that is not a trusted proxy's is the client."""

from __future__ import annotations

from ipaddress import ip_network
from types import SimpleNamespace

import pytest

from sanbox.api.forwarded import forwarded_for, scope_client
from sanbox.api.settings import ServerSettings, trusted_networks

pytestmark = pytest.mark.unit

PROXIES = [ip_network("10.0.0.0/8"), ip_network("fd00::/8")]


def test_the_header_of_an_untrusted_peer_is_ignored() -> None:
    assert forwarded_for("203.0.113.7", ["198.51.100.1"], PROXIES) == "203.0.113.7"
    assert forwarded_for("203.0.113.7", ["198.51.100.1"], []) == "203.0.113.7"


def test_a_trusted_proxy_gives_the_address_it_saw_not_what_the_client_wrote() -> None:
    assert forwarded_for("10.0.0.2", ["198.51.100.1"], PROXIES) == "198.51.100.1"
    # the client wrote "192.0.2.9, 10.0.0.5" itself; the proxy appended what it saw
    spoofed = ["192.0.2.9, 10.0.0.5, 198.51.100.1"]
    assert forwarded_for("10.0.0.2", spoofed, PROXIES) == "198.51.100.1"
    chain = ["198.51.100.1, 10.0.0.3", "10.0.0.4"]  # two trusted proxies, two headers
    assert forwarded_for("10.0.0.2", chain, PROXIES) == "198.51.100.1"
    assert forwarded_for("fd00::1", ["2001:db8::5"], PROXIES) == "2001:db8::5"


def test_garbage_or_nothing_leaves_the_proxy_as_the_client() -> None:
    assert forwarded_for("10.0.0.2", [], PROXIES) == "10.0.0.2"
    assert forwarded_for("10.0.0.2", ["not-an-address"], PROXIES) == "10.0.0.2"
    assert forwarded_for("10.0.0.2", ["198.51.100.1, junk"], PROXIES) == "10.0.0.2"


def _scope(peer: str, xff: str, trusted: str) -> dict[str, object]:
    settings = ServerSettings(data_dir="/nonexistent", trusted_proxies=trusted_networks(trusted))  # type: ignore[arg-type]
    app = SimpleNamespace(state=SimpleNamespace(settings=settings))
    return {"client": (peer, 1), "headers": [(b"x-forwarded-for", xff.encode())], "app": app}


def test_by_default_no_proxy_is_trusted() -> None:
    assert scope_client(_scope("10.0.0.2", "198.51.100.1", "")) == "10.0.0.2"
    assert scope_client(_scope("10.0.0.2", "198.51.100.1", "10.0.0.0/8")) == "198.51.100.1"
    assert scope_client(_scope("10.9.0.2", "198.51.100.1", "10.0.0.2/32")) == "10.9.0.2"
    with pytest.raises(ValueError):
        trusted_networks("10.0.0.0/8, nonsense")
