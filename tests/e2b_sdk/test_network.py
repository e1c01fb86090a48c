"""E2B's `update_network` through its SDK, unmodified: `allowOut` becomes the computer's
allowlist at once (with E2B's "deny everything else" or without), `allow_internet_access=False`
empties it, an update that names nothing gives back the template's, and what Sanbox does not
offer (a proxy, transform rules, DNS servers) is refused, the allowlist unchanged."""

from __future__ import annotations

import httpx
import pytest
from e2b import ALL_TRAFFIC, Sandbox
from e2b.exceptions import SandboxException, SandboxNotFoundException

from sanbox.host.door import recipe_for

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


def _allow(server: E2bServer, sbx: Sandbox) -> list[str]:
    computer = "cmp_" + sbx.sandbox_id[4:]
    admin = {"Authorization": f"Bearer {server.key}"}
    got = httpx.get(f"{server.url}/v1/computers/{computer}", headers=admin)
    return list(got.json()["allow"])


def test_update_network_sets_the_allowlist(e2b_server: E2bServer) -> None:
    sbx = Sandbox.create("base", envs=e2b_server.envs)
    try:
        sbx.update_network({"allow_out": ["example.com", "*.pypi.org"], "deny_out": [ALL_TRAFFIC]})
        assert _allow(e2b_server, sbx) == ["example.com", "*.pypi.org"]
        sbx.update_network({"allow_out": ["api.github.com"]})  # E2B's allows win: the same
        assert _allow(e2b_server, sbx) == ["api.github.com"]
        sbx.update_network({"allow_internet_access": False})
        assert _allow(e2b_server, sbx) == []
        sbx.update_network({})  # what it leaves out is cleared: the template's own
        assert _allow(e2b_server, sbx) == list(recipe_for("base").allow)

        sbx.update_network({"allow_out": ["example.com"]})
        for refused in (
            {"allow_out": ["a.test"], "dns_servers": ["1.1.1.1"]},
            {"allow_out": ["not a host!"]},
        ):
            with pytest.raises(SandboxException) as caught:
                sbx.update_network(refused)  # type: ignore[arg-type]
            assert "400" in str(caught.value) or "not" in str(caught.value), caught.value
            assert _allow(e2b_server, sbx) == ["example.com"], "a refused update changed it"
    finally:
        sbx.kill()
    with pytest.raises(SandboxException):  # at create too: never run without what it asked
        Sandbox.create("base", network={"dns_servers": ["1.1.1.1"]}, envs=e2b_server.envs)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.update_network("cmp-000000000000", {"allow_out": []})
