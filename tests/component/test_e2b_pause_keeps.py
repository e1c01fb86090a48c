"""A sandbox paused through E2B's `pause` is kept until `connect` resumes it (with connect's
timeout, from then) or `kill` deletes it, as E2B's (a paused sandbox has no running timeout:
`PostSandboxesSandboxIDPause` removes it from the orchestrator, which alone keeps one): one whose
timeout kills it was deleted, its disk with it, when its old timeout passed, and one whose timeout
pauses it without memory was stopped, its memory dropped. A sandbox the idle watcher suspended
within its timeout (`running` to E2B) is paused as E2B would pause it: it was refused 409, as only
a running computer may be paused. A computer paused through /v1 keeps its lifetime."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sanbox.control.errors import ConflictError
from sanbox.store.models import ComputerRow, Org

from .conftest import E2bStand
from .test_e2b_lifecycle import v1, wait_state
from .test_e2b_paused import e2b_state, pause, stat

pytestmark = pytest.mark.component


def computer_id(sandbox: str) -> str:
    return sandbox.replace("-", "_", 1)


def wait_past(row: dict[str, Any]) -> None:
    """Until the lifetime `row` had is over (a wait on the clock: the end is what is awaited)."""
    ends = datetime.fromisoformat(row["lifetime_ends_at"]) + timedelta(seconds=0.3)
    while (left := (ends - datetime.now(UTC)).total_seconds()) > 0:
        time.sleep(min(left, 0.1))


def enforced(e2b: E2bStand, sandbox: str) -> str | None:
    """The deadline watcher's act on the sandbox, done now: what it did, or None (nothing due)."""
    computers = e2b.client.app.state.computers  # type: ignore[attr-defined]
    assert e2b.client.portal is not None
    found: str | None = e2b.client.portal.call(
        computers.enforce_deadline, computer_id(sandbox), "delete"
    )
    return found


def connect(e2b: E2bStand, sandbox: str, timeout: int) -> datetime:
    at = datetime.now(UTC)
    r = e2b.client.post(
        f"/e2b/sandboxes/{sandbox}/connect", headers=e2b.api, json={"timeout": timeout}
    )
    assert r.status_code == 201, r.text  # resumed (or started): it was at rest
    return at


def timeout_left(e2b: E2bStand, sandbox: str, since: datetime) -> float:
    return (datetime.fromisoformat(v1(e2b, sandbox)["lifetime_ends_at"]) - since).total_seconds()


def killed(e2b: E2bStand, sandbox: str) -> None:
    r = e2b.client.delete(f"/e2b/sandboxes/{sandbox}", headers=e2b.api)
    assert r.status_code == 204, r.text
    r = e2b.client.get(f"/v1/computers/{computer_id(sandbox)}", headers=e2b.v1)
    assert r.status_code == 404, r.text


@pytest.mark.parametrize(
    ("create", "memory", "rests"),
    [
        ({}, True, "paused"),  # killed at its timeout
        ({}, False, "stopped"),
        ({"autoPause": True, "autoPauseMemory": False}, True, "paused"),  # stopped at it
    ],
)
def test_a_paused_sandbox_outlives_its_old_timeout(
    e2b: E2bStand, pausable: None, create: dict[str, Any], memory: bool, rests: str
) -> None:
    sandbox, envd = e2b.create(timeout=2, **create)
    before = v1(e2b, sandbox)
    paused_at = datetime.now(UTC)
    pause(e2b, sandbox, memory=memory)
    wait_past(before)
    assert enforced(e2b, sandbox) is None  # nothing due: it has no timeout while paused
    assert v1(e2b, sandbox)["state"] == rests
    assert e2b_state(e2b, sandbox) == "paused"
    listed = e2b.client.get("/e2b/v2/sandboxes?state=paused", headers=e2b.api).json()
    assert [s["sandboxID"] for s in listed] == [sandbox]
    end = datetime.fromisoformat(listed[0]["endAt"])  # its pause, as E2B's
    assert paused_at - timedelta(seconds=1) <= end <= paused_at + timedelta(seconds=2), end
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/timeout", headers=e2b.api, json={"timeout": 5})
    assert r.status_code == 404, r.text  # still no timeout to set

    connected_at = connect(e2b, sandbox, 120)
    assert 110 <= timeout_left(e2b, sandbox, connected_at) <= 130  # connect's, from then
    assert v1(e2b, sandbox)["state"] == "running" and e2b_state(e2b, sandbox) == "running"
    assert stat(e2b, envd) == 200
    assert enforced(e2b, sandbox) is None
    killed(e2b, sandbox)


def test_a_computer_paused_through_v1_keeps_its_lifetime(e2b: E2bStand, pausable: None) -> None:
    made = e2b.client.post(
        "/v1/computers",
        headers=e2b.v1,
        json={"template": "base", "lifetime": 2, "on_lifetime": "delete"},
    )
    assert made.status_code in (200, 201), made.text
    computer = made.json()["id"]
    r = e2b.client.post(f"/v1/computers/{computer}/pause", headers=e2b.v1)
    assert r.status_code == 200, r.text
    wait_past(r.json())
    assert enforced(e2b, computer.replace("_", "-", 1)) in ("delete", None)  # (or done already)
    assert e2b.client.get(f"/v1/computers/{computer}", headers=e2b.v1).status_code == 404


def idle_suspended(e2b: E2bStand, **create: Any) -> tuple[str, dict[str, str]]:
    """A sandbox the idle watcher suspended within its timeout: `running` to E2B."""
    sandbox, envd = e2b.create(timeout=600, **create)
    r = e2b.client.patch(
        f"/v1/computers/{computer_id(sandbox)}", headers=e2b.v1, json={"idle_timeout": 1}
    )
    assert r.status_code == 200, r.text
    wait_state(e2b, sandbox, "suspended")
    assert e2b_state(e2b, sandbox) == "running"
    return sandbox, envd


def test_an_idle_suspended_sandbox_is_paused_until_connect(e2b: E2bStand, pausable: None) -> None:
    sandbox, envd = idle_suspended(e2b)
    paused_at = datetime.now(UTC)
    pause(e2b, sandbox)
    assert v1(e2b, sandbox)["state"] == "paused"  # no more woken by its next use
    assert e2b_state(e2b, sandbox) == "paused"
    end = datetime.fromisoformat(
        e2b.client.get(f"/e2b/sandboxes/{sandbox}", headers=e2b.api).json()["endAt"]
    )
    assert paused_at - timedelta(seconds=1) <= end <= paused_at + timedelta(seconds=2), end
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/pause", headers=e2b.api)
    assert r.status_code == 409 and "already paused" in r.text, r.text
    assert stat(e2b, envd) == 502  # the SDK's SandboxNotRunningException: connect() resumes it
    assert enforced(e2b, sandbox) is None

    connected_at = connect(e2b, sandbox, 120)
    assert 110 <= timeout_left(e2b, sandbox, connected_at) <= 130
    assert stat(e2b, envd) == 200
    killed(e2b, sandbox)


def test_an_idle_suspended_sandbox_that_auto_resumes_is_paused_and_woken_by_use(
    e2b: E2bStand, pausable: None
) -> None:
    sandbox, envd = idle_suspended(e2b, autoPause=True, autoResume={"enabled": True})
    pause(e2b, sandbox)
    assert v1(e2b, sandbox)["state"] == "suspended"  # woken by its next use, as E2B's
    assert e2b_state(e2b, sandbox) == "paused"
    # a second pause that read it running before the first (the route's check is outside the
    # computer's lock) is refused under the lock, as E2B's second pause is: not paused again
    computers = e2b.client.app.state.computers  # type: ignore[attr-defined]
    cid = computer_id(sandbox)
    with e2b.client.app.state.db.session() as s:  # type: ignore[attr-defined]
        org = s.get(Org, s.get(ComputerRow, cid).org_id)
    assert e2b.client.portal is not None
    with pytest.raises(ConflictError):
        e2b.client.portal.call(functools.partial(computers.pause, org, cid, True, True))
    woken_at = datetime.now(UTC)
    assert stat(e2b, envd) == 200
    wait_state(e2b, sandbox, "running")
    assert 590 <= timeout_left(e2b, sandbox, woken_at) <= 610  # its create's timeout
    killed(e2b, sandbox)


def test_an_idle_suspended_sandbox_paused_without_memory_is_stopped(
    e2b: E2bStand, pausable: None
) -> None:
    sandbox, _ = idle_suspended(e2b)
    pause(e2b, sandbox, memory=False)
    assert v1(e2b, sandbox)["state"] == "stopped"
    assert e2b_state(e2b, sandbox) == "paused"
    connected_at = connect(e2b, sandbox, 60)
    assert 50 <= timeout_left(e2b, sandbox, connected_at) <= 70
    killed(e2b, sandbox)


def test_a_sandbox_paused_through_e2b_and_resumed_through_v1_gets_its_create_s_timeout(
    e2b: E2bStand, pausable: None
) -> None:
    """Its lifetime ended at the pause: a resume that gives none (/v1's) gives it again, as an
    auto-resume's wake does, rather than have it deleted at once."""
    sandbox, _ = e2b.create(timeout=900)
    pause(e2b, sandbox)
    resumed_at = datetime.now(UTC)
    r = e2b.client.post(f"/v1/computers/{computer_id(sandbox)}/resume", headers=e2b.v1)
    assert r.status_code == 200, r.text
    assert 890 <= timeout_left(e2b, sandbox, resumed_at) <= 910
    assert enforced(e2b, sandbox) is None and v1(e2b, sandbox)["state"] == "running"


def test_a_lifetime_given_through_v1_counts_for_a_paused_sandbox(
    e2b: E2bStand, pausable: None
) -> None:
    sandbox, _ = e2b.create(timeout=900)
    pause(e2b, sandbox)
    r = e2b.client.patch(
        f"/v1/computers/{computer_id(sandbox)}", headers=e2b.v1, json={"lifetime": 1}
    )
    assert r.status_code == 200, r.text
    wait_past(r.json())
    assert enforced(e2b, sandbox) in ("delete", None)  # (or done already)
    r = e2b.client.get(f"/v1/computers/{computer_id(sandbox)}", headers=e2b.v1)
    assert r.status_code == 404, r.text


def test_a_create_retried_after_a_pause_leaves_the_paused_sandbox_as_it_is(
    e2b: E2bStand, pausable: None
) -> None:
    """A retry of the create (its Idempotency-Key) answers the sandbox it made; one paused
    since keeps no timeout (the retry gave it one again, which deleted it while it rested)."""
    headers = {**e2b.api, "Idempotency-Key": "retried-create"}
    body = {"templateID": "base", "timeout": 2}
    made = e2b.client.post("/e2b/sandboxes", headers=headers, json=body)
    assert made.status_code == 201, made.text
    sandbox = made.json()["sandboxID"]
    before = v1(e2b, sandbox)
    pause(e2b, sandbox)
    again = e2b.client.post("/e2b/sandboxes", headers=headers, json=body)
    assert again.status_code == 201 and again.json()["sandboxID"] == sandbox, again.text
    assert e2b_state(e2b, sandbox) == "paused"
    wait_past(before)
    with e2b.client.app.state.db.session() as s:  # type: ignore[attr-defined]
        assert s.get(ComputerRow, computer_id(sandbox)).pause_ended_lifetime
    assert enforced(e2b, sandbox) is None  # still nothing due while it rests
    assert v1(e2b, sandbox)["state"] == "paused"
    killed(e2b, sandbox)
