"""A create that a warm pool serves goes through the same checks as any create: a retry with the
same Idempotency-Key returns the computer the first made (never a second member, never a
database error), and a rule the allowlist refuses is refused with the same 422 before a member
is touched, and a retry sent while the claim is being applied waits for it. (Pools handing out
real guests: tests/vm/test_pools.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from sanbox.control import pool_claims
from sanbox.control.errors import HostUnavailableError
from sanbox.fleet.link.link import HostUnreachableError
from sanbox.fleet.operations import Operations

from .conftest import Server, beside, still_waiting
from .test_api_computers import error

pytestmark = pytest.mark.component


def pool_ready(server: Server, size: int) -> None:
    r = server.client.put("/v1/pools/base", json={"size": size}, headers=server.headers())
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60
    while True:
        pools = server.client.get("/v1/pools", headers=server.headers()).json()["pools"]
        if pools and pools[0]["ready"] >= size:
            return
        assert time.monotonic() < deadline, pools
        time.sleep(0.05)


def members(server: Server) -> int:
    return int(server.client.get("/v1/pools", headers=server.headers()).json()["pools"][0]["ready"])


def test_a_retried_create_on_a_pool_returns_the_first_computer(server: Server) -> None:
    pool_ready(server, 2)
    h = {**server.headers(), "Idempotency-Key": "retry-1"}
    first = server.client.post("/v1/computers", json={"template": "base", "name": "a1"}, headers=h)
    assert first.status_code == 201, first.text
    again = server.client.post("/v1/computers", json={"template": "base", "name": "a1"}, headers=h)
    assert again.status_code in (200, 201), again.text
    assert again.json()["id"] == first.json()["id"]
    listed = server.client.get("/v1/computers", headers=server.headers()).json()["computers"]
    assert [c["name"] for c in listed] == ["a1"]
    other = server.client.post("/v1/computers", json={"template": "base", "name": "a2"}, headers=h)
    assert error(other) == (409, "idempotency_conflict"), other.text


def test_a_claim_with_a_refused_rule_gets_the_same_422_as_a_plain_create(server: Server) -> None:
    h = server.headers()
    body = {"template": "base", "allow": ["10.0.0.0/8:22"]}
    plain = server.client.post("/v1/computers", json=body, headers=h)
    assert plain.status_code == 422, plain.text
    pool_ready(server, 1)
    claimed = server.client.post("/v1/computers", json=body, headers=h)
    assert error(claimed) == error(plain), claimed.text
    assert claimed.json()["error"]["message"] == plain.json()["error"]["message"]
    assert members(server) == 1, "a pool member was touched by a refused request"
    assert server.client.get("/v1/computers", headers=h).json()["computers"] == []


def test_a_claim_whose_disk_growth_does_not_fit_is_refused_and_leaves_the_member(
    server: Server,
) -> None:
    h = server.headers()
    body = {"template": "base", "disk_gib": 16_384}
    plain = server.client.post("/v1/computers", json=body, headers=h)
    assert plain.status_code == 507, plain.text
    pool_ready(server, 1)
    claimed = server.client.post("/v1/computers", json=body, headers=h)
    assert error(claimed) == error(plain), claimed.text
    assert members(server) == 1, "the member left its pool for a refused request"
    assert server.client.get("/v1/computers", headers=h).json()["computers"] == []
    fits = server.client.post("/v1/computers", json={"template": "base", "disk_gib": 2}, headers=h)
    assert fits.status_code == 201, fits.text  # grown by 1 GiB at its claim: room enough


def test_an_unnamed_claim_whose_warm_name_was_taken_since_gets_another(server: Server) -> None:
    # A member's warm-up gives its guest a generated name, which an unnamed claim keeps; one
    # that another computer took meanwhile is not handed out twice (nor refused): a new one is
    # made, and set in the guest at the claim.
    h = server.headers()
    pool_ready(server, 2)
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    pools = computers.pools
    deadline = time.monotonic() + 30
    while len(pools._hostnames) < 2:
        assert time.monotonic() < deadline, "the members' warm-ups named nothing"
        time.sleep(0.05)
    older, younger = sorted(pools._hostnames, key=lambda i: computers.fleet.by_id(i).created_at)
    warm = pools._hostnames[younger]
    # a named create takes the older member, with the younger one's warm name
    taken = server.client.post("/v1/computers", json={"template": "base", "name": warm}, headers=h)
    assert taken.status_code == 201, taken.text
    assert taken.json()["id"] == older
    claimed = server.client.post("/v1/computers", json={"template": "base"}, headers=h)
    assert claimed.status_code == 201, claimed.text
    assert claimed.json()["id"] == younger
    assert claimed.json()["name"] not in (warm, "")


def _claimed(server: Server, computer_id: str) -> bool:
    r = server.client.get(f"/v1/computers/{computer_id}/events", headers=server.headers())
    return any(e["data"].get("start") == "claimed" for e in r.json()["events"])


def test_a_create_that_names_no_template_claims_from_the_base_pool(server: Server) -> None:
    pool_ready(server, 1)
    made = server.client.post("/v1/computers", json={"name": "plain"}, headers=server.headers())
    assert made.status_code == 201, made.text
    assert made.json()["template"] == "base"
    assert _claimed(server, made.json()["id"]), "a base pool's member was not claimed"


def test_a_member_this_node_did_not_start_is_attached_and_claimed(server: Server) -> None:
    # another API node made it, or this one restarted: this node holds no machine of it
    pool_ready(server, 1)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    held = [cid for cid, _ in list(fleet.machines.items()) if fleet.by_id(cid).pool is not None]
    assert len(held) == 1
    fleet.machines.pop(held[0])
    made = server.client.post("/v1/computers", json={"template": "base"}, headers=server.headers())
    assert made.status_code == 201, made.text
    assert made.json()["id"] == held[0], "the member was discarded, not claimed"
    assert _claimed(server, held[0])
    ran = server.client.post(
        f"/v1/computers/{held[0]}/exec", json={"cmd": ["echo", "on"]}, headers=server.headers()
    )
    assert ran.json()["stdout"] == "on\n", ran.text


def test_a_retry_while_the_claim_is_applied_waits_for_it(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool_ready(server, 1)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    go = threading.Event()
    real = fleet.machine_locked

    async def held(row: Any) -> Any:  # the claim's hostname, disk and policy: held here
        await asyncio.to_thread(go.wait, 60)
        return await real(row)

    monkeypatch.setattr(fleet, "machine_locked", held)
    h = {**server.headers(), "Idempotency-Key": "retry-2"}
    answers: dict[str, Any] = {}

    body = {"template": "base", "name": "r1"}
    first = beside(server, answers, "first", "POST", "/v1/computers", body, h)
    deadline = time.monotonic() + 30
    while not server.client.get("/v1/computers", headers=server.headers()).json()["computers"]:
        assert time.monotonic() < deadline, "the claim never took its member"
        time.sleep(0.05)
    retry = beside(server, answers, "retry", "POST", "/v1/computers", body, h)
    still_waiting(retry, go, "the retry answered while the claim was being applied")
    first.join(60)
    retry.join(60)
    assert answers["first"].status_code == 201, answers["first"].text
    assert answers["retry"].json()["id"] == answers["first"].json()["id"]
    assert answers["retry"].json()["state"] == "running"
    assert _claimed(server, answers["first"].json()["id"])


def test_a_claim_whose_member_cannot_be_configured_nor_removed_leaves_no_computer(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its host stopped answering between the take and the claim's first call: the member
    # cannot be configured, nor destroyed now. It is nobody's computer: hidden in its pool in
    # error (the refill discards it once its host answers), the create made the ordinary way,
    # and a retry with the same key returns that, never the member.
    pool_ready(server, 1)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    [member] = [cid for cid in fleet.machines if fleet.by_id(cid).pool is not None]

    async def away(row: Any) -> Any:
        raise HostUnavailableError(f"computer {row.name}'s host: host h1 does not answer")

    async def stays(computer_id: str) -> None:
        raise HostUnreachableError("host h1 does not answer")

    real_destroy = fleet.runtime.destroy
    monkeypatch.setattr(fleet, "machine_locked", away)
    monkeypatch.setattr(fleet.runtime, "destroy", stays)
    h = {**server.headers(), "Idempotency-Key": "away-2"}
    body = {"template": "base", "name": "c1"}
    made = server.client.post("/v1/computers", json=body, headers=h)
    assert made.status_code == 201, made.text
    assert made.json()["id"] != member and not _claimed(server, made.json()["id"])
    listed = server.client.get("/v1/computers", headers=server.headers()).json()["computers"]
    assert [(c["id"], c["name"]) for c in listed] == [(made.json()["id"], "c1")]
    again = server.client.post("/v1/computers", json=body, headers=h)
    assert again.json()["id"] == made.json()["id"], again.text
    gone = server.client.get(f"/v1/computers/{member}", headers=server.headers())
    assert gone.status_code == 404, gone.text
    held = fleet.by_id(member)
    assert held is not None and (held.state, held.idempotency_key) == ("error", None)
    assert held.pool is not None and held.name.startswith("pool.")
    monkeypatch.setattr(fleet.runtime, "destroy", real_destroy)  # the host answers again
    deadline = time.monotonic() + 30
    while fleet.by_id(member) is not None:
        assert time.monotonic() < deadline, "the refill left the member"
        time.sleep(0.1)


def test_a_claim_whose_member_another_node_holds_gives_it_back(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another API node's operation holds the member past the claim's wait: the claim cannot be
    # applied, and the member is given back hidden, as when its configuring fails (before, it
    # kept the caller's name and Idempotency-Key, unconfigured, and a retry returned it)
    pool_ready(server, 1)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    [member] = [cid for cid in fleet.machines if fleet.by_id(cid).pool is not None]
    monkeypatch.setattr(pool_claims, "VERB_WAIT", 0.3)
    elsewhere = Operations(fleet.db).begin(member, "warm", node="another-node:0000")
    try:
        h = {**server.headers(), "Idempotency-Key": "held-1"}
        body = {"template": "base", "name": "c2"}
        made = server.client.post("/v1/computers", json=body, headers=h)
        assert made.status_code == 201, made.text
        assert made.json()["id"] != member
        again = server.client.post("/v1/computers", json=body, headers=h)
        assert again.json()["id"] == made.json()["id"], again.text
        held = fleet.by_id(member)
        assert held is not None and (held.state, held.idempotency_key) == ("error", None)
        assert held.pool is not None and held.name.startswith("pool.")
    finally:
        Operations(fleet.db).finish(elsewhere.op_id)
    server.client.app.state.computers.pools.wake()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while fleet.by_id(member) is not None:
        assert time.monotonic() < deadline, "the refill left the member"
        time.sleep(0.1)


def test_the_refill_never_destroys_a_member_a_claim_took_since_it_looked(server: Server) -> None:
    # The refill reads its pool's members, then discards those it should (a rebuilt template's,
    # each taking seconds); a claim that took one meanwhile made it the caller's computer. The
    # discard reads the record again under the member's operation and leaves it alone.
    pool_ready(server, 1)
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    fleet = computers.fleet
    [member] = [cid for cid in list(fleet.machines) if fleet.by_id(cid).pool is not None]
    pool_id = fleet.by_id(member).pool
    made = server.client.post("/v1/computers", json={"name": "mine"}, headers=server.headers())
    assert made.status_code == 201, made.text
    assert made.json()["id"] == member
    server.client.portal.call(  # type: ignore[union-attr]
        computers.pools.discard, member, "the template was rebuilt: replaced", pool_id
    )
    got = server.client.get("/v1/computers/mine", headers=server.headers())
    assert got.status_code == 200 and got.json()["state"] == "running", got.text
