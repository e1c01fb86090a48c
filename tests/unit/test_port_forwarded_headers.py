"""What a guest behind a published port is told about its client: the address and scheme Sanbox
believes (`api/forwarded.py`), never what the client wrote in `X-Forwarded-*` itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sanbox.api.ports.relay import request_headers
from sanbox.api.settings import ServerSettings, trusted_networks

pytestmark = pytest.mark.unit


def _scope(peer: str, trusted: str, *headers: tuple[bytes, bytes]) -> dict[str, object]:
    settings = ServerSettings(data_dir="/nonexistent", trusted_proxies=trusted_networks(trusted))  # type: ignore[arg-type]
    app = SimpleNamespace(state=SimpleNamespace(settings=settings))
    host = (b"host", b"8080-web.acme.example.com")
    return {"scheme": "http", "client": (peer, 1), "headers": [host, *headers], "app": app}


def _told(scope: dict[str, object]) -> dict[bytes, list[bytes]]:
    told: dict[bytes, list[bytes]] = {}
    for name, value in request_headers(scope, "127.0.0.1:8080"):
        told.setdefault(name, []).append(value)
    return told


def test_a_client_cannot_tell_the_guest_its_address_or_scheme() -> None:
    written = (
        (b"x-forwarded-for", b"6.6.6.6"),
        (b"x-forwarded-proto", b"https"),
        (b"forwarded", b"for=6.6.6.6;proto=https"),
        (b"x-real-ip", b"6.6.6.6"),
    )
    told = _told(_scope("203.0.113.9", "", *written))
    assert told[b"x-forwarded-for"] == [b"203.0.113.9"]
    assert told[b"x-forwarded-proto"] == [b"http"]
    assert b"forwarded" not in told and b"x-real-ip" not in told
    assert told[b"x-forwarded-host"] == [b"8080-web.acme.example.com"]


def test_a_trusted_proxy_tells_the_guest_what_the_browser_used() -> None:
    """Behind a proxy that ends TLS (`SANBOX_TRUSTED_PROXIES`) the browser spoke https, and the
    client is the address the proxy saw: a guest building its own URLs needs both."""
    reported = ((b"x-forwarded-for", b"6.6.6.6, 198.51.100.1"), (b"x-forwarded-proto", b"https"))
    told = _told(_scope("10.0.0.2", "10.0.0.0/8", *reported))
    assert told[b"x-forwarded-for"] == [b"198.51.100.1"]
    assert told[b"x-forwarded-proto"] == [b"https"]
