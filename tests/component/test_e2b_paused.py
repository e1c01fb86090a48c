"""A sandbox paused through E2B's API answers as E2B's does: `set_timeout` of it is not found
(404, the SDK's `SandboxNotFoundException`: E2B keeps a timeout for running sandboxes only), where
it was accepted and moved the lifetime of a sandbox that was not running; one made with
`autoResume` is woken by its next use, with its create's timeout, however it was paused (it
stayed paused until `connect`: only its lifetime's auto-pause suspended it); its `endAt` is
the time of its pause, as E2B's (it was its timeout's end)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import E2bStand
from .test_e2b_lifecycle import v1, wait_state

pytestmark = pytest.mark.component


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


def stat(e2b: E2bStand, envd: dict[str, str]) -> int:
    r = e2b.client.post("/e2b-envd/filesystem.Filesystem/Stat", json={"path": "/"}, headers=envd)
    return r.status_code


def e2b_state(e2b: E2bStand, sandbox: str) -> str:
    r = e2b.client.get(f"/e2b/sandboxes/{sandbox}", headers=e2b.api)
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


def wait_e2b_paused(e2b: E2bStand, sandbox: str) -> None:
    """Paused to E2B as soon as the pause answered, even in its first second (its lifetime, in
    whole seconds from its creation and one at least, then ends after the pause)."""
    assert e2b_state(e2b, sandbox) == "paused"


def test_a_paused_sandbox_that_auto_resumes_is_woken_by_its_next_use(
    e2b: E2bStand, pausable: None
) -> None:
    """E2B's proxy resumes a paused sandbox whose snapshot says `autoResume`, however it was
    paused (`ResumeSandbox`, packages/api/internal/handlers/proxy_grpc.go), with its create's
    timeout."""
    sandbox, envd = e2b.create(timeout=900, autoPause=True, autoResume={"enabled": True})
    pause(e2b, sandbox)
    assert v1(e2b, sandbox)["state"] == "suspended"
    wait_e2b_paused(e2b, sandbox)  # in its first second too
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/pause", headers=e2b.api)
    assert r.status_code == 409 and "already paused" in r.text, r.text  # as E2B answers
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/timeout", json={"timeout": 300}, headers=e2b.api)
    assert r.status_code == 404, r.text  # a paused sandbox has no timeout to set, as E2B's
    assert e2b_state(e2b, sandbox) == "paused"

    woken_at = datetime.now(UTC)
    assert stat(e2b, envd) == 200  # woken by the call and served, not refused 502
    row = wait_state(e2b, sandbox, "running")
    left = (datetime.fromisoformat(row["lifetime_ends_at"]) - woken_at).total_seconds()
    assert 890 <= left <= 910, row  # its create's timeout, from the wake
    assert e2b_state(e2b, sandbox) == "running"


def test_a_paused_sandbox_without_auto_resume_waits_for_connect(
    e2b: E2bStand, pausable: None
) -> None:
    sandbox, envd = e2b.create(timeout=900, autoPause=True)
    pause(e2b, sandbox)
    assert v1(e2b, sandbox)["state"] == "paused"
    assert stat(e2b, envd) == 502  # the SDK's SandboxNotRunningException: connect() resumes it


@pytest.mark.parametrize(
    "create",
    [
        {},
        {"autoPause": True},
        {"autoPause": True, "autoResume": {"enabled": True}},
    ],
)
def test_a_paused_sandbox_s_end_is_its_pause(
    e2b: E2bStand, pausable: None, create: dict[str, Any]
) -> None:
    """E2B answers a paused sandbox's `endAt` as the time its snapshot was taken
    (`GetSandboxesSandboxID`, packages/api/internal/handlers/sandbox_get.go, and
    `snapshotsToPaginatedSandboxes`, sandboxes_list.go), not its timeout's end."""
    sandbox, _ = e2b.create(timeout=3600, **create)
    before = datetime.now(UTC)
    pause(e2b, sandbox)
    after = datetime.now(UTC)
    wait_e2b_paused(e2b, sandbox)
    r = e2b.client.get(f"/e2b/sandboxes/{sandbox}", headers=e2b.api)
    assert r.status_code == 200, r.text
    listed = e2b.client.get("/e2b/v2/sandboxes?state=paused", headers=e2b.api).json()
    assert [s["sandboxID"] for s in listed] == [sandbox]
    for said in (r.json()["endAt"], listed[0]["endAt"]):
        end = datetime.fromisoformat(said)
        assert before - timedelta(seconds=1) <= end <= after + timedelta(seconds=1), said
