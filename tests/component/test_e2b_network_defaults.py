"""E2B lets everything out when a create names no `allowOut`; Sanbox uses the template's egress
allowlist (`base`'s is empty: nothing goes out), and its allowlist takes host names, wildcards and
`cidr:port` rules, not E2B's address ranges: `8.8.8.0/24` or `0.0.0.0/0` is refused 400 saying
what it takes and what to do (it said only that the entry was not a host name, a wildcard or a
cidr:port rule), at a create and at `update_network`, nothing made or changed. A bare IP address
(`8.8.8.8`: every port of it in E2B) was read as a host name (an HTTP `Host` of it, port 80
only): it is refused too, saying to give the port (`8.8.8.8/32:53`), which is taken."""

from __future__ import annotations

import pytest

from .conftest import E2bStand

pytestmark = pytest.mark.component


def allow(e2b: E2bStand, sandbox: str) -> list[str]:
    r = e2b.client.get(f"/v1/computers/{sandbox.replace('-', '_', 1)}", headers=e2b.v1)
    assert r.status_code == 200, r.text
    return list(r.json()["allow"])


def test_no_allow_out_is_the_templates_allowlist(e2b: E2bStand) -> None:
    sandbox, _ = e2b.create()
    assert allow(e2b, sandbox) == []  # base's: nothing goes out, where E2B lets all out
    named, _ = e2b.create(network={"allowOut": ["pypi.org", "*.pythonhosted.org"]})
    assert sorted(allow(e2b, named)) == ["*.pythonhosted.org", "pypi.org"]


@pytest.mark.parametrize("entry", ["8.8.8.0/24", "0.0.0.0/0", "2001:db8::/32"])
def test_an_address_range_is_refused_saying_what_the_allowlist_takes(
    e2b: E2bStand, entry: str
) -> None:
    body = {"templateID": "base", "network": {"allowOut": ["pypi.org", entry]}}
    r = e2b.client.post("/e2b/v2/sandboxes", headers=e2b.api, json=body)
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert entry in message and "host names" in message and "list the hosts" in message
    assert e2b.client.get("/v1/computers", headers=e2b.v1).json()["computers"] == []

    sandbox, _ = e2b.create(network={"allowOut": ["pypi.org"]})
    r = e2b.client.put(
        f"/e2b/sandboxes/{sandbox}/network", headers=e2b.api, json={"allowOut": [entry]}
    )
    assert r.status_code == 400, r.text
    assert "host names" in r.json()["message"]
    assert allow(e2b, sandbox) == ["pypi.org"]


def test_an_address_range_with_a_port_is_taken(e2b: E2bStand) -> None:
    # TEST-NET-3, clear of this host's addresses (the fleet partition test's veth takes
    # 203.0.113.0/30 while it runs beside this one; a range holding one is refused)
    sandbox, _ = e2b.create(network={"allowOut": ["203.0.113.64/28:5432"]})
    assert allow(e2b, sandbox) == ["203.0.113.64/28:5432"]


@pytest.mark.parametrize("entry", ["8.8.8.8", "1.1.1.1", "2001:db8::1"])
def test_a_bare_address_is_refused_saying_to_give_its_port(e2b: E2bStand, entry: str) -> None:
    body = {"templateID": "base", "network": {"allowOut": [entry]}}
    r = e2b.client.post("/e2b/v2/sandboxes", headers=e2b.api, json=body)
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "network.allowOut" in message and entry in message, message
    assert "IP address" in message and "8.8.8.8/32:53" in message, message
    assert e2b.client.get("/v1/computers", headers=e2b.v1).json()["computers"] == []

    sandbox, _ = e2b.create(network={"allowOut": ["pypi.org"]})
    r = e2b.client.put(
        f"/e2b/sandboxes/{sandbox}/network", headers=e2b.api, json={"allowOut": [entry]}
    )
    assert r.status_code == 400, r.text
    assert "IP address" in r.json()["message"]
    assert allow(e2b, sandbox) == ["pypi.org"]


def test_an_address_with_its_port_is_taken(e2b: E2bStand) -> None:
    sandbox, _ = e2b.create(network={"allowOut": ["8.8.8.8/32:53"]})
    assert allow(e2b, sandbox) == ["8.8.8.8/32:53"]
