"""The egress values that cross the link (fleet/link/egress_wire.py): a handover goes and comes
back whole, and anything out of bounds is refused whole, with errors that name the field and
never the value; denials and rules likewise. The host's queue of denials is bounded and says
what it dropped; what a host holds for a computer is replaced whole and forgotten."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl

import pytest

from sanbox.fleet.link import egress_wire as ew
from sanbox.fleet.link.agent import MAX_BODY
from sanbox.fleet.link.host_egress import DenialQueue
from sanbox.host.egress.denials import Denial
from sanbox.host.egress.held import HeldInterception
from sanbox.host.egress.injection import Injection
from sanbox.host.egress.interception import Handover
from sanbox.host.egress.org_ca import new_ca
from sanbox.host.egress.policy import Policy, PolicyError

pytestmark = pytest.mark.unit

VALUE = b"sk-unit-very-secret-0042"
CA = new_ca("org_unit")


def _handover(count: int = 1, value: bytes = VALUE) -> Handover:
    injections = tuple(
        Injection(
            hosts=("api.example.com", "*.example.org"),
            header=b"Authorization",
            template=b"Bearer {value}",
            placeholder=f"sbx_ph_{n:016d}".encode(),
            value=value,
        )
        for n in range(count)
    )
    return Handover("org_unit", injections, CA[0], CA[1], strict_placeholders=True)


def test_a_handover_crosses_whole() -> None:
    sent = _handover(2)
    wired = ew.handover_out(sent)
    assert wired is not None
    back = ew.handover_in(json.loads(json.dumps(wired)))
    assert back == sent
    assert ew.handover_in(None) is None and ew.handover_out(None) is None
    assert VALUE.decode() not in repr(back) and CA[1].decode() not in repr(back)


def test_the_digest_names_a_handover_without_carrying_it() -> None:
    one, two = ew.handover_out(_handover()), ew.handover_out(_handover(value=b"sk-other-0000"))
    assert ew.handover_digest(one) == ew.handover_digest(ew.handover_out(_handover()))
    assert ew.handover_digest(one) != ew.handover_digest(two)
    assert ew.handover_digest(None) is None
    digest = ew.handover_digest(one) or ""
    assert len(digest) == 64 and VALUE.decode() not in digest


def _refused(wired: object) -> str:
    with pytest.raises(ValueError) as caught:
        ew.handover_in(wired)
    message = str(caught.value)
    assert VALUE.decode() not in message and base64.b64encode(VALUE).decode() not in message
    return message


def test_a_handover_out_of_bounds_is_refused_whole() -> None:
    good = ew.handover_out(_handover())
    assert good is not None
    many = ew.handover_out(_handover(ew.MAX_INJECTIONS + 1))
    assert "secrets.injections" in _refused(many)
    assert "secrets.injections" in _refused({**good, "injections": []})
    item = good["injections"][0]
    long_value = base64.b64encode(b"x" * (ew.MAX_VALUE + 1)).decode()
    assert "value" in _refused({**good, "injections": [{**item, "value": long_value}]})
    assert "not base64" in _refused({**good, "injections": [{**item, "value": "%%%"}]})
    hosts = ["h.example.com"] * (ew.MAX_HOSTS + 1)
    assert "hosts" in _refused({**good, "injections": [{**item, "hosts": hosts}]})
    crlf = base64.b64encode(VALUE + b"\r\nX-Evil: 1").decode()
    assert "printable" in _refused({**good, "injections": [{**item, "value": crlf}]})
    framing = base64.b64encode(b"Host").decode()
    assert "cannot carry" in _refused({**good, "injections": [{**item, "header": framing}]})
    big_pem = base64.b64encode(b"k" * (ew.MAX_PEM + 1)).decode()
    assert "ca_key_pem" in _refused({**good, "ca_key_pem": big_pem})
    assert "org_id" in _refused({**good, "org_id": "../../etc"})
    assert "an object" in _refused([good])


def test_rules_are_parsed_again_and_bounded() -> None:
    policy = Policy.of(["allowed.test", "*.pypi.org", "203.0.113.0/24:5432"])
    assert ew.rules_in(ew.rules_out(policy)) == policy
    with pytest.raises(ValueError, match="at most"):
        ew.rules_in(["a.test"] * (ew.MAX_RULES + 1))
    with pytest.raises(ValueError, match="strings"):
        ew.rules_in(["a" * (ew.MAX_RULE + 1)])
    with pytest.raises(PolicyError):
        ew.rules_in(["not a host"])
    with pytest.raises(ValueError):
        ew.rules_in("allowed.test")


def test_computer_ids_are_checked() -> None:
    assert ew.computer_id_in("cmp_abc-1") == "cmp_abc-1"
    for bad in ("", "../x", "A" * 65, 7, None, "cmp\n"):
        with pytest.raises(ValueError):
            ew.computer_id_in(bad)


def test_a_denial_crosses_and_a_bad_one_is_refused() -> None:
    denial = Denial("blocked.test", 443, "not in the allowlist", repeats=3, quiet=12.5, others=2)
    computer_id, back = ew.denial_in(json.loads(json.dumps(ew.denial_out("cmp_1", denial))))
    assert (computer_id, back) == ("cmp_1", denial)
    good = ew.denial_out("cmp_1", denial)
    for bad in (
        {**good, "port": -1},
        {**good, "repeats": "3"},
        {**good, "name": ""},
        {**good, "reason": "x" * (ew.MAX_REASON + 1)},
        {**good, "quiet": -1},
        {**good, "computer_id": "../x"},
        [good],
    ):
        with pytest.raises(ValueError):
            ew.denial_in(bad)


def test_the_denial_queue_is_bounded_and_says_what_it_dropped() -> None:
    queue = DenialQueue(bound=3)
    for n in range(5):
        queue.put("cmp_a" if n < 2 else "cmp_b", Denial(f"h{n}.test", 443, "no"))
    assert len(queue) == 3
    taken, dropped = queue.take()
    assert [d.name for _c, d in taken] == ["h2.test", "h3.test", "h4.test"]
    assert dropped == {"cmp_a": 2}
    assert queue.take() == ([], {})
    for n in range(5):
        queue.put("cmp_c", Denial(f"h{n}.test", 443, "no"))
    taken, _ = queue.take(limit=2)
    assert len(taken) == 2 and len(queue) == 1


def test_what_a_host_holds_is_replaced_whole_and_forgotten() -> None:
    async def scenario() -> None:
        held = HeldInterception(_handover(), ssl.create_default_context())
        assert held.applies("api.example.com") and held.applies("a.b.example.org")
        assert not held.applies("example.org") and held.strict_placeholders
        context = await held.server_context("api.example.com")
        assert isinstance(context, ssl.SSLContext)
        held.replace(_handover(value=b"sk-rotated-000001"))
        assert [i.value for i in held.injections()] == [b"sk-rotated-000001"]
        held.forget()
        assert held.handover() is None and list(held.injections()) == []
        assert not held.applies("api.example.com") and not held.strict_placeholders
        with pytest.raises(ssl.SSLError):
            await held.server_context("api.example.com")

    asyncio.run(scenario())


def test_the_largest_handover_fits_in_one_call() -> None:
    value = b"v" * ew.MAX_VALUE
    hosts = tuple(f"{n:063d}.{'b' * 63}.{'c' * 63}.{'d' * 61}" for n in range(ew.MAX_HOSTS))
    assert {len(h) for h in hosts} == {ew.MAX_HOST}
    injection = Injection(hosts, b"X-Api-Key", b"{value}", b"sbx_ph_" + b"0" * 64, value)
    handover = Handover("org_1", (injection,) * ew.MAX_INJECTIONS, CA[0], CA[1])
    call = {
        "computer_id": "cmp_1",
        "org_id": "org_1",
        "rules": ["a.test"] * ew.MAX_RULES,
        "secrets": ew.handover_out(handover),
    }
    assert len(json.dumps(call)) < MAX_BODY
    assert ew.handover_in(call["secrets"]) == handover
