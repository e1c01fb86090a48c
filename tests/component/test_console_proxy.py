"""The console behind a proxy that ends TLS (`SANBOX_TRUSTED_PROXIES`): its login and writes
from the browser's https origin are its own (they were refused `csrf_failed`, the console taking
the proxy's plain http for the browser's), and its cookie is the Secure `__Host-` one. A client
that is no trusted proxy is not believed."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sanbox.api import ServerSettings, create_app
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from .conftest import fake_image

pytestmark = pytest.mark.component


@pytest.mark.parametrize(("peer", "trusted"), [("10.0.0.5", True), ("192.0.2.7", False)])
def test_a_login_through_a_trusted_tls_proxy_is_https(
    short_tmp: Path, peer: str, trusted: bool
) -> None:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(
        data_dir=dd.root, client_config=None, watch_interval=0.2, trusted_proxies=("10.0.0.0/8",)
    )
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
    with TestClient(app, client=(peer, 4000), base_url="http://console.test") as client:
        key = client.app.state.first_key  # type: ignore[attr-defined]
        r = client.post(
            "/console/login",
            data={"key": key},
            headers={"origin": "https://console.test", "x-forwarded-proto": "https"},
            follow_redirects=False,
        )
        if not trusted:
            assert r.status_code == 403, r.text
            return
        assert r.status_code == 303, r.text
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("__Host-sanbox_console=") and "Secure" in cookie, cookie
