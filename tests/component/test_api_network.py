"""A tenant asks the API for allow rules that reach this host, its neighbours or other tenants:
refused at create and at PUT /network with `invalid_rule`, nothing written; an operator can open
a private range, and only rules inside it pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sanbox.api import ServerSettings, create_app
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from .conftest import Server, fake_image

pytestmark = pytest.mark.component


def refused(r: object, rule: str) -> str:
    assert r.status_code == 422, r.text  # type: ignore[attr-defined]
    body = r.json()["error"]  # type: ignore[attr-defined]
    assert body["code"] == "invalid_rule" and body["message"].startswith(f"'{rule}' is refused")
    message: str = body["message"]
    return message


def test_inward_rules_are_refused_at_create_and_nothing_is_made(server: Server) -> None:
    h = server.headers()
    for rule in ("10.0.0.0/8:22", "169.254.169.254/32:80", "127.0.0.1/32:7070", "0.0.0.0/0:443"):
        r = server.client.post("/v1/computers", json={"allow": ["allowed.test", rule]}, headers=h)
        message = refused(r, rule)
        assert "Allow " in message  # says what to do
    assert server.client.get("/v1/computers", headers=h).json()["computers"] == []
    assert server.data_dir.computer_ids() == []


def test_inward_rules_are_refused_at_put_network_and_the_list_stays(server: Server) -> None:
    h = server.headers()
    r = server.client.post(
        "/v1/computers", json={"name": "net", "allow": ["allowed.test"]}, headers=h
    )
    assert r.status_code == 201, r.text
    r = server.client.put("/v1/computers/net/network", json={"allow": ["10.0.0.0/8:22"]}, headers=h)
    assert "SANBOX_TENANT_PRIVATE_RANGES" in refused(r, "10.0.0.0/8:22")
    r = server.client.put(
        "/v1/computers/net/network", json={"allow": ["203.0.113.128/25:5432"]}, headers=h
    )
    assert r.status_code == 200 and r.json()["allow"] == ["203.0.113.128/25:5432"], r.text
    types = [
        e["type"] for e in server.client.get("/v1/computers/net/events", headers=h).json()["events"]
    ]
    assert types.count("network.policy") == 1  # the refused list was never recorded


@pytest.fixture
def operator_server(short_tmp: Path) -> Iterator[Server]:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(
        data_dir=dd.root,
        client_config=None,
        watch_interval=0.2,
        tenant_private_ranges="10.20.0.0/16",
    )
    runtime = HostRuntime(dd, LocalDriver(), networking=False)
    with TestClient(create_app(settings, runtime)) as client:
        yield Server(client, client.app.state.first_key, dd, settings)  # type: ignore[attr-defined]


def test_an_operator_range_lets_rules_inside_it_through(operator_server: Server) -> None:
    s, h = operator_server, operator_server.headers()
    r = s.client.post(
        "/v1/computers", json={"name": "db", "allow": ["10.20.0.0/16:5432"]}, headers=h
    )
    assert r.status_code == 201, r.text
    r = s.client.put("/v1/computers/db/network", json={"allow": ["10.0.0.0/8:22"]}, headers=h)
    assert "open here: 10.20.0.0/16" in refused(r, "10.0.0.0/8:22")
    s.client.delete("/v1/computers/db", headers=h)
