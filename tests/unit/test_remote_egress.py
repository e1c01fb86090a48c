"""A fleet host's egress as the control plane drives it, over a scripted link: a start carries
the org, the rules and the secrets' handover, and never starts without the secrets it needs;
reads come from the host's report; `drain` records each denial and says what the host dropped,
for the host's own computers only;
the watch converges a host to the records (starts what is missing, sends a changed allowlist or
binding again, stops what the records do not run) and records a failure once per reason."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from sanbox.control import fleet_egress
from sanbox.control.fleet_egress import FleetEgress
from sanbox.fleet.link import egress_wire as ew
from sanbox.fleet.link.calls import CALLS
from sanbox.fleet.link.host_egress import CALLS as EGRESS_CALLS
from sanbox.fleet.link.link import HostUnreachableError
from sanbox.fleet.link.remote_egress import RemoteEgress
from sanbox.host.egress.denials import Denial
from sanbox.host.egress.injection import Injection
from sanbox.host.egress.interception import Handover
from sanbox.host.egress.policy import Policy
from sanbox.host.errors import HostError

pytestmark = pytest.mark.unit

VALUE = b"sk-remote-unit-0001"


class Link:
    name = "h1"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.report: dict[str, Any] | None = {"egress": {"computers": {}, "denials": 0}}
        self.answers: dict[str, Any] = {"egress_update": 0}

    async def call(self, name: str, **args: Any) -> Any:
        self.calls.append((name, args))
        return self.answers.get(name)

    def reported(self) -> dict[str, Any] | None:
        return self.report


class Bound:
    def __init__(self, handover: Handover | None) -> None:
        self._handover = handover

    def handover(self) -> Handover | None:
        return self._handover


def _handover(value: bytes = VALUE) -> Handover:
    injection = Injection(
        ("echo.test",), b"Authorization", b"Bearer {value}", b"sbx_ph_0000000000000001", value
    )
    return Handover("org_1", (injection,), b"cert", b"key")


def _egress(
    link: Link, bound: dict[str, Handover | None], denied: list[tuple[str, Denial]]
) -> RemoteEgress:
    return RemoteEgress(
        link,
        lambda computer_id, denial: denied.append((computer_id, denial)),
        lambda computer_id: Bound(bound.get(computer_id)),  # type: ignore[arg-type, return-value]
        lambda _computer_id: "org_1",
    )


def test_a_start_carries_the_org_rules_and_secrets() -> None:
    link = Link()
    denied: list[tuple[str, Denial]] = []
    egress = _egress(link, {"cmp_s": _handover()}, denied)
    asyncio.run(egress.start("cmp_s", Policy.of(["echo.test"])))
    asyncio.run(egress.start("cmp_p", Policy.of([])))
    (name, args), (_, plain) = link.calls
    assert name == "egress_start" and args["org_id"] == "org_1"
    assert args["rules"] == ["echo.test"]
    assert ew.handover_in(args["secrets"]) == _handover()
    assert plain["secrets"] is None


def test_no_start_without_the_secrets_it_needs() -> None:
    link = Link()

    def broken(_computer_id: str) -> Any:
        raise RuntimeError(VALUE.decode())  # whatever it says never reaches the message

    egress = RemoteEgress(link, lambda *_a: None, broken, lambda _c: "org_1")
    with pytest.raises(HostError) as caught:
        asyncio.run(egress.start("cmp_s", Policy.of(["echo.test"])))
    assert "egress stays off" in str(caught.value) and VALUE.decode() not in str(caught.value)
    many = Handover("org_1", _handover().injections * (ew.MAX_INJECTIONS + 1), b"c", b"k")
    with pytest.raises(HostError, match="at most"):
        asyncio.run(_egress(link, {"cmp_s": many}, []).start("cmp_s", Policy()))
    assert [name for name, _args in link.calls] == ["egress_stop", "egress_stop"]  # off, never on


def test_reads_come_from_the_report() -> None:
    link = Link()
    seen = {"rules": ["allowed.test"], "carried": 1234, "open": 2, "secrets": None}
    link.report = {"egress": {"computers": {"cmp_1": seen}, "denials": 5}}
    egress = _egress(link, {}, [])
    assert egress.policy("cmp_1") == Policy.of(["allowed.test"])
    assert (egress.carried("cmp_1"), egress.open_connections("cmp_1")) == (1234, 2)
    assert (egress.policy("cmp_2"), egress.carried("cmp_2"), egress.open_connections("cmp_2")) == (
        None,
        None,
        0,
    )
    assert egress.waiting() == 5 and egress.running() == {"cmp_1"}
    assert egress.has_gateway()
    link.report = {"egress": None}  # a host that makes no network runs no gateway
    assert not egress.has_gateway() and egress.running() == set()
    link.report = None  # unreachable: nothing is known
    assert egress.carried("cmp_1") is None and egress.waiting() == 0


def test_drain_records_denials_and_says_what_was_dropped() -> None:
    link = Link()
    denied: list[tuple[str, Denial]] = []
    good = ew.denial_out("cmp_1", Denial("blocked.test", 443, "not in the allowlist"))
    link.answers["egress_denials"] = {
        "denials": [good, {**good, "port": "x"}],
        "dropped": {"cmp_2": 40},
    }
    assert asyncio.run(_egress(link, {}, denied).drain()) == 1
    assert denied[0] == ("cmp_1", Denial("blocked.test", 443, "not in the allowlist"))
    computer_id, dropped = denied[1]
    assert computer_id == "cmp_2" and dropped.others == 40
    assert "queue of denials was full" in dropped.message()


def test_a_host_speaks_for_its_own_computers_only() -> None:
    link = Link()
    denied: list[tuple[str, Denial]] = []
    mine = ew.denial_out("cmp_mine", Denial("blocked.test", 443, "not in the allowlist"))
    theirs = ew.denial_out("cmp_theirs", Denial("blocked.test", 443, "not in the allowlist"))
    link.answers["egress_denials"] = {
        "denials": [mine, theirs],
        "dropped": {"cmp_theirs": 5, "cmp_mine": "many", "../x": 3},
    }
    assert asyncio.run(_egress(link, {}, denied).drain({"cmp_mine"})) == 1
    assert [c for c, _d in denied] == ["cmp_mine"]
    link.answers["egress_denials"] = "not an answer"
    assert asyncio.run(_egress(link, {}, denied).drain({"cmp_mine"})) == 0


class Fleet:
    """What FleetEgress asks of the fleet when it converges: locks, the records as they are now
    (`rows`: set by `round_over`, as the round read them, unless a test changes them) and events."""

    def __init__(self) -> None:
        self.locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.records: list[tuple[str, str, str]] = []
        self.rows: dict[str, SimpleNamespace] = {}

    def lock(self, computer_id: str) -> asyncio.Lock:
        return self.locks[computer_id]

    def by_id(self, computer_id: str) -> SimpleNamespace | None:
        return self.rows.get(computer_id)

    def record(self, computer_id: str, _dst: object, event: str, message: str) -> None:
        self.records.append((computer_id, event, message))


def round_over(
    watch: FleetEgress, fleet: Fleet, egress: RemoteEgress, computers: list[Any], *more: Any
) -> Any:
    """A round over `computers` (the records as it read them, and as they still are)."""
    for computer_id, state, allow in computers:
        fleet.rows.setdefault(computer_id, SimpleNamespace(state=state, allow=allow))
    return watch._converge(egress, computers, *more)


def test_the_watch_converges_a_host_to_the_records() -> None:
    link, fleet = Link(), Fleet()
    bound: dict[str, Handover | None] = {"cmp_secret": _handover()}
    egress = _egress(link, bound, [])
    stale = ew.handover_digest(ew.handover_out(_handover(b"sk-old-value-0000")))
    link.report = {
        "egress": {
            "computers": {
                "cmp_same": {"rules": ["a.test"], "carried": 0, "open": 0, "secrets": None},
                "cmp_rules": {"rules": ["a.test"], "carried": 0, "open": 0, "secrets": None},
                "cmp_secret": {"rules": [], "carried": 0, "open": 0, "secrets": stale},
                "cmp_gone": {"rules": [], "carried": 0, "open": 0, "secrets": None},
                "cmp_paused": {"rules": [], "carried": 0, "open": 0, "secrets": None},
                "bld-building": {"rules": ["deb.test"], "carried": 0, "open": 0, "secrets": None},
            },
            "denials": 0,
        }
    }
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    computers = [
        ("cmp_same", "running", ["a.test"]),
        ("cmp_rules", "running", ["b.test"]),
        ("cmp_secret", "running", []),
        ("cmp_missing", "running", ["a.test"]),
        ("cmp_paused", "paused", []),
        ("cmp_busy", "running", []),
    ]

    async def converge() -> None:
        async with fleet.lock("cmp_busy"):  # a verb at work: left to it
            await round_over(watch, fleet, egress, computers, ["bld-building"])  # a build's: kept

    asyncio.run(converge())
    done = {(name, args["computer_id"]) for name, args in link.calls}
    assert done == {
        ("egress_stop", "cmp_gone"),
        ("egress_update", "cmp_rules"),
        ("egress_secrets", "cmp_secret"),
        ("egress_start", "cmp_missing"),
    }
    assert fleet.records == []

    # a start that fails is recorded once per reason, not every round
    async def refused(name: str, **args: Any) -> Any:
        raise HostError("the namespace is gone")

    link.call = refused  # type: ignore[method-assign]
    link.report = {"egress": {"computers": {}, "denials": 0}}
    for _ in range(3):
        asyncio.run(round_over(watch, fleet, egress, [("cmp_missing", "running", [])]))
    assert fleet.records == [
        ("cmp_missing", "network.error", "egress is off: the namespace is gone")
    ]


def test_a_computer_whose_secrets_cannot_cross_has_its_egress_stopped() -> None:
    link, fleet = Link(), Fleet()
    many = Handover("org_1", _handover().injections * (ew.MAX_INJECTIONS + 1), b"c", b"k")
    seen = {"rules": [], "carried": 0, "open": 0, "secrets": "a-digest-of-what-it-had"}
    link.report = {"egress": {"computers": {"cmp_s": seen}, "denials": 0}}
    egress = _egress(link, {"cmp_s": many}, [])
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    asyncio.run(round_over(watch, fleet, egress, [("cmp_s", "running", [])]))
    assert [(name, args["computer_id"]) for name, args in link.calls] == [("egress_stop", "cmp_s")]
    ((computer_id, event, message),) = fleet.records
    assert (computer_id, event) == ("cmp_s", "network.error") and "at most" in message
    link.calls.clear()
    with pytest.raises(HostError):  # a pool claim's set_policy, a renewal: stopped the same way
        asyncio.run(egress.set_policy("cmp_s", Policy()))
    with pytest.raises(HostError):
        asyncio.run(egress.renew_secrets("cmp_s"))
    assert [name for name, _args in link.calls] == ["egress_stop", "egress_stop"]


def test_every_call_the_control_plane_makes_is_one_the_host_serves() -> None:
    made = set(re.findall(r'call\(\s*"(\w+)"', inspect.getsource(RemoteEgress)))
    assert made == set(EGRESS_CALLS) and made <= set(CALLS), made


def test_an_allowlist_the_host_refuses_turns_its_egress_off_but_silence_does_not() -> None:
    link, fleet = Link(), Fleet()
    seen = {"rules": ["a.test"], "carried": 0, "open": 0, "secrets": None}
    link.report = {"egress": {"computers": {"cmp_r": seen}, "denials": 0}}
    egress = _egress(link, {}, [])
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    calls: list[str] = []

    async def refusing(name: str, **args: Any) -> Any:
        calls.append(name)
        if name == "egress_update":
            raise HostError("10.30.0.0/24:5432 reaches where computers may not go")

    link.call = refusing  # type: ignore[method-assign]
    asyncio.run(round_over(watch, fleet, egress, [("cmp_r", "running", ["b.test"])]))
    assert calls == ["egress_update", "egress_stop"]  # off, not on with the old allowlist
    why = "egress is off: 10.30.0.0/24:5432 reaches where computers may not go"
    assert fleet.records == [("cmp_r", "network.error", why)]

    async def silent(name: str, **args: Any) -> Any:
        calls.append(name)
        raise HostUnreachableError("host h1 is unreachable")

    calls.clear()
    link.call = silent  # type: ignore[method-assign]
    with pytest.raises(HostUnreachableError):  # the round for this host ends; nothing said
        fleet.rows.clear()
        asyncio.run(round_over(watch, fleet, egress, [("cmp_r", "running", ["c.test"])]))
    assert calls == ["egress_update"] and len(fleet.records) == 1


def test_a_round_never_undoes_an_allowlist_changed_since_it_read_the_records() -> None:
    link, fleet = Link(), Fleet()
    seen = {"rules": ["b.test"], "carried": 0, "open": 0, "secrets": None}  # the verb sent it
    link.report = {"egress": {"computers": {"cmp_t": seen}, "denials": 0}}
    egress = _egress(link, {}, [])
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    fleet.rows["cmp_t"] = SimpleNamespace(state="running", allow=["b.test"])  # the record now
    asyncio.run(watch._converge(egress, [("cmp_t", "running", ["a.test"])]))  # read before
    assert link.calls == [], "the round sent the allowlist back to what it read"
    link.report = {"egress": {"computers": {}, "denials": 0}}  # its egress gone: started anew
    asyncio.run(watch._converge(egress, [("cmp_t", "running", ["a.test"])]))
    ((name, args),) = link.calls
    assert name == "egress_start" and "b.test" in json.dumps(args)


def test_a_host_that_holds_its_answer_holds_up_only_its_own_part_of_a_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The round went host by host: one that never answered a call stopped every other host's
    egress (secret unbinds and rotations included). Each host's part now runs beside the others
    and is cut past `HOST_ROUND`."""
    monkeypatch.setattr(fleet_egress, "HOST_ROUND", 0.2)
    link, fleet = Link(), Fleet()

    asked: list[str] = []

    async def never(name: str, **args: Any) -> Any:
        asked.append(name)
        await asyncio.Event().wait()

    link.call = never  # type: ignore[method-assign]
    egress = _egress(link, {}, [])
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    watch.of = lambda host_id: egress  # type: ignore[method-assign]
    fleet.rows = {"cmp_missing": SimpleNamespace(state="running", allow=["a.test"])}

    async def held() -> None:
        async with asyncio.timeout(5):
            await watch._host_round("h1", [("cmp_missing", "running", ["a.test"])], ())

    asyncio.run(held())
    assert asked == ["egress_start"]  # it was asked, and held: cut
