"""E2B's `lifecycle` at a create: `on_timeout="pause"` with `auto_resume` (`autoPause` and
`autoResume: {enabled}`) ends the timeout suspended, so the next envd call wakes the sandbox
and is served (it raised SandboxNotRunningException: the sandbox was paused as without
auto-resume), and the woken sandbox gets its timeout again: the one its create gave, as E2B's
(it got as long as its last run had, so a `set_timeout` or `connect` before the pause shortened
every later run); `autoPauseMemory: false` is a pause
without memory (a stop); get_info and list answer `lifecycle` in E2B's shape. Create fields Sanbox
does not offer (`volumeMounts`, `mcp`, `iam`, `network.maskRequestHost`, `network.httpsPorts`)
were answered 201 and ignored: they are refused 400, naming the field, nothing made."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from e2b.api.client.models.sandbox_detail import SandboxDetail
from e2b.api.client.models.sandbox_lifecycle import SandboxLifecycle

from .conftest import E2bStand

pytestmark = pytest.mark.component


def v1(e2b: E2bStand, sandbox: str) -> dict[str, Any]:
    r = e2b.client.get(f"/v1/computers/{sandbox.replace('-', '_', 1)}", headers=e2b.v1)
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_state(e2b: E2bStand, sandbox: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while (row := v1(e2b, sandbox))["state"] != state:
        assert time.monotonic() < deadline, f"never {state}: {row['state']}"
        time.sleep(0.05)
    return row


def info(e2b: E2bStand, sandbox: str) -> SandboxDetail:
    r = e2b.client.get(f"/e2b/sandboxes/{sandbox}", headers=e2b.api)
    assert r.status_code == 200, r.text
    return SandboxDetail.from_dict(r.json())


def lifecycle_of(e2b: E2bStand, sandbox: str) -> SandboxLifecycle:
    found = info(e2b, sandbox).lifecycle
    assert isinstance(found, SandboxLifecycle), found
    return found


def stat(e2b: E2bStand, envd: dict[str, str]) -> int:
    r = e2b.client.post("/e2b-envd/filesystem.Filesystem/Stat", json={"path": "/"}, headers=envd)
    return r.status_code


def test_auto_resume_wakes_the_sandbox_on_its_next_envd_call(e2b: E2bStand, pausable: None) -> None:
    sandbox, envd = e2b.create(timeout=1, autoPause=True, autoResume={"enabled": True})
    lifecycle = lifecycle_of(e2b, sandbox)
    assert lifecycle.on_timeout.value == "pause" and lifecycle.auto_resume is True
    listed = e2b.client.get("/e2b/v2/sandboxes", headers=e2b.api).json()
    assert listed[0]["lifecycle"] == {"onTimeout": "pause", "autoResume": True}

    wait_state(e2b, sandbox, "suspended")
    assert info(e2b, sandbox).state.value == "paused"  # as E2B says an auto-paused sandbox
    assert stat(e2b, envd) == 200  # woken by the call, not refused 502
    row = wait_state(e2b, sandbox, "running")
    assert row["lifetime"] >= 300  # its timeout again, five minutes at least, from the wake
    time.sleep(1.0)  # the deadline watcher (every 0.2 s) leaves it running
    assert v1(e2b, sandbox)["state"] == "running"
    assert info(e2b, sandbox).state.value == "running"


def test_a_woken_sandbox_gets_the_timeout_its_create_gave(e2b: E2bStand, pausable: None) -> None:
    sandbox, envd = e2b.create(timeout=900, autoPause=True, autoResume={"enabled": True})
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/timeout", headers=e2b.api, json={"timeout": 1})
    assert r.status_code == 204, r.text  # its run cut short: the create's timeout is kept apart
    wait_state(e2b, sandbox, "suspended")
    woken_at = datetime.now(UTC)
    assert stat(e2b, envd) == 200
    row = wait_state(e2b, sandbox, "running")
    left = datetime.fromisoformat(row["lifetime_ends_at"]) - woken_at
    assert 890 <= left.total_seconds() <= 910, row  # 900 s from the wake (it had 300 s)


def timeout_left(row: dict[str, Any], since: datetime) -> float:
    return (datetime.fromisoformat(row["lifetime_ends_at"]) - since).total_seconds()


def test_the_create_s_timeout_is_kept_through_wakes_set_timeouts_and_network_updates(
    e2b: E2bStand, pausable: None
) -> None:
    """As E2B's API keeps the auto-resume timeout its create chose (`autoResume.timeout`, carried
    by every resume; `set_timeout` moves only the running sandbox's end, `update_network` only
    its network): every wake gives it again, whatever came between; a `connect` gives its own."""
    sandbox, envd = e2b.create(timeout=900, autoPause=True, autoResume={"enabled": True})
    for round_ in range(2):
        r = e2b.client.post(
            f"/e2b/sandboxes/{sandbox}/timeout", headers=e2b.api, json={"timeout": 1 + round_}
        )
        assert r.status_code == 204, r.text
        wait_state(e2b, sandbox, "suspended")
        woken_at = datetime.now(UTC)
        assert stat(e2b, envd) == 200
        row = wait_state(e2b, sandbox, "running")
        assert 890 <= timeout_left(row, woken_at) <= 910, (round_, row)
        r = e2b.client.put(
            f"/e2b/sandboxes/{sandbox}/network", headers=e2b.api, json={"allowOut": ["pypi.org"]}
        )
        assert r.status_code == 204, r.text
    assert v1(e2b, sandbox)["allow"] == ["pypi.org"]  # kept through the last wake's run

    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/timeout", headers=e2b.api, json={"timeout": 1})
    assert r.status_code == 204, r.text
    wait_state(e2b, sandbox, "suspended")
    connected_at = datetime.now(UTC)
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/connect", headers=e2b.api, json={"timeout": 120})
    assert r.status_code == 201, r.text  # resumed by the connect: its timeout, not the create's
    assert 110 <= timeout_left(v1(e2b, sandbox), connected_at) <= 130
    assert v1(e2b, sandbox)["allow"] == ["pypi.org"]


def test_auto_pause_without_auto_resume_stays_paused(e2b: E2bStand, pausable: None) -> None:
    sandbox, envd = e2b.create(timeout=1, autoPause=True)
    lifecycle = lifecycle_of(e2b, sandbox)
    assert lifecycle.on_timeout.value == "pause" and lifecycle.auto_resume is False
    wait_state(e2b, sandbox, "paused")
    assert stat(e2b, envd) == 502  # the SDK's SandboxNotRunningException: connect() resumes it


def test_auto_pause_without_memory_stops(e2b: E2bStand) -> None:
    sandbox, _ = e2b.create(timeout=1, autoPause=True, autoPauseMemory=False)
    wait_state(e2b, sandbox, "stopped")
    assert lifecycle_of(e2b, sandbox).on_timeout.value == "pause"


def test_a_sandbox_killed_at_its_timeout_says_so(e2b: E2bStand) -> None:
    sandbox, _ = e2b.create(timeout=60)
    lifecycle = lifecycle_of(e2b, sandbox)
    assert lifecycle.on_timeout.value == "kill" and lifecycle.auto_resume is False


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"volumeMounts": [{"name": "data", "path": "/data"}]}, "volumeMounts"),
        ({"mcp": {"github": {"token": "x"}}}, "mcp"),
        ({"iam": {"tokens": {"aws": {"role": "r"}}}}, "iam"),
        ({"network": {"maskRequestHost": "localhost:${PORT}"}}, "network.maskRequestHost"),
        ({"network": {"httpsPorts": [3000]}}, "network.httpsPorts"),
        ({"autoResume": {"enabled": True}}, "autoResume"),
        (
            {"autoPause": True, "autoPauseMemory": False, "autoResume": {"enabled": True}},
            "autoResume",
        ),
    ],
)
def test_what_sanbox_does_not_offer_is_refused(
    e2b: E2bStand, body: dict[str, Any], named: str
) -> None:
    r = e2b.client.post("/e2b/v2/sandboxes", headers=e2b.api, json={"templateID": "base", **body})
    assert r.status_code == 400, r.text
    assert r.json()["code"] == 400 and named in r.json()["message"]
    assert e2b.client.get("/v1/computers", headers=e2b.v1).json()["computers"] == []


def test_empty_values_of_what_is_not_offered_are_accepted(e2b: E2bStand) -> None:
    body: dict[str, Any] = {"volumeMounts": [], "mcp": None, "iam": {"tokens": {}}, "secure": True}
    sandbox, _ = e2b.create(**body, network={"httpsPorts": []})
    assert info(e2b, sandbox).state.value == "running"
