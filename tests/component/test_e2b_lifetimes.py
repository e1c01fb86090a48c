"""E2B's `connect` and a create retried with its Idempotency-Key lengthen a sandbox's lifetime
when it has one, and never give one to a computer that has none (0: made through /v1 without
one, or cleared there since): it would be stopped or deleted at a deadline nobody asked for."""

from __future__ import annotations

import pytest

from .conftest import E2bStand

pytestmark = pytest.mark.component


def lifetime(e2b: E2bStand, computer: str) -> int:
    r = e2b.client.get(f"/v1/computers/{computer}", headers=e2b.v1)
    assert r.status_code == 200, r.text
    return int(r.json()["lifetime"])


def test_connect_gives_no_lifetime_to_a_computer_without_one(e2b: E2bStand) -> None:
    made = e2b.client.post("/v1/computers", headers=e2b.v1, json={"template": "base"})
    assert made.status_code in (200, 201), made.text
    computer = made.json()["id"]
    sandbox = computer.replace("_", "-", 1)
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/connect", headers=e2b.api, json={"timeout": 300})
    assert r.status_code == 200, r.text
    assert lifetime(e2b, computer) == 0


def test_connect_lengthens_a_lifetime_that_exists(e2b: E2bStand) -> None:
    sandbox, _ = e2b.create(timeout=30)
    computer = sandbox.replace("-", "_", 1)
    before = lifetime(e2b, computer)
    r = e2b.client.post(f"/e2b/sandboxes/{sandbox}/connect", headers=e2b.api, json={"timeout": 300})
    assert r.status_code == 200, r.text
    assert before <= 31 and lifetime(e2b, computer) >= 300


def test_a_create_retry_gives_no_lifetime_to_a_computer_whose_lifetime_was_cleared(
    e2b: E2bStand,
) -> None:
    key = {**e2b.api, "Idempotency-Key": "retry-1"}
    body = {"templateID": "base", "timeout": 60}
    first = e2b.client.post("/e2b/sandboxes", headers=key, json=body)
    assert first.status_code == 201, first.text
    computer = first.json()["sandboxID"].replace("-", "_", 1)
    cleared = e2b.client.patch(f"/v1/computers/{computer}", headers=e2b.v1, json={"lifetime": 0})
    assert cleared.status_code == 200, cleared.text
    again = e2b.client.post("/e2b/sandboxes", headers=key, json=body)
    assert again.status_code == 201, again.text
    assert again.json()["sandboxID"] == first.json()["sandboxID"]
    assert lifetime(e2b, computer) == 0
