"""A sandbox paused through E2B's API answers as E2B's does: `set_timeout` of it is not found
(404, the SDK's `SandboxNotFoundException`: E2B keeps a timeout for running sandboxes only), where
it was accepted and moved the lifetime of a sandbox that was not running."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import E2bStand

pytestmark = pytest.mark.component


def v1(e2b: E2bStand, sandbox: str) -> dict[str, Any]:
    r = e2b.client.get(f"/v1/computers/{sandbox.replace('-', '_', 1)}", headers=e2b.v1)
    assert r.status_code == 200, r.text
    return dict(r.json())


def pause(e2b: E2bStand, sandbox: str, **body: Any) -> None:
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/pause", headers=e2b.api, json=body or None)
    assert r.status_code == 204, r.text


@pytest.mark.parametrize("memory", [True, False])
def test_set_timeout_of_a_paused_sandbox_is_not_found(
    e2b: E2bStand, pausable: None, memory: bool
) -> None:
    sandbox, _ = e2b.create(timeout=600)
    pause(e2b, sandbox, memory=memory)
    lifetime = v1(e2b, sandbox)["lifetime"]
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/timeout", headers=e2b.api, json={"timeout": 5})
    assert (r.status_code, r.json()["code"]) == (404, 404), r.text
    assert "connect(timeout=" in r.json()["message"]
    assert v1(e2b, sandbox)["lifetime"] == lifetime  # nothing moved

    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/connect", headers=e2b.api, json={"timeout": 60})
    assert r.status_code == 201, r.text
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/timeout", headers=e2b.api, json={"timeout": 5})
    assert r.status_code == 204, r.text  # running again: it has a timeout to set
