"""A fleet host's egress failures as the control plane records them: once per kind of failure
(the class the host's error is raised again as), never once per text, so that a host that words
its refusal anew every round (or gives it a new `code`) writes one `network.error`, not one a
round forever; a host that cycles through the door's error classes writes at most `MOST_KINDS`
per computer within `AGAIN_AFTER`; what is kept is bounded and forgets computers that are gone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sanbox.control.fleet_egress import FleetEgress
from sanbox.control.said_once import AGAIN_AFTER, MOST_KINDS, SaidOnce, kind_of
from sanbox.fleet.link import wire
from sanbox.fleet.link.link import HostUnreachableError
from sanbox.host.errors import HostError

from .test_remote_egress import Fleet, Link, _egress, round_over

pytestmark = pytest.mark.unit


def _refusing(link: Link, said: list[dict[str, Any]]) -> None:
    """The host refuses every call with the next of `said` (as its wire sends it)."""
    rounds = iter(said)

    async def refuse(name: str, **args: Any) -> Any:
        raise wire.error_in(next(rounds))

    link.call = refuse  # type: ignore[method-assign]


def test_a_host_that_rewords_its_refusal_every_round_writes_one_event() -> None:
    link, fleet = Link(), Fleet()
    said = [
        {"type": "HostError", "code": f"code_{n}", "message": f"refused, take {n} " + "x" * 900}
        for n in range(20)
    ]
    _refusing(link, said)
    egress = _egress(link, {}, [])
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    for _ in range(20):  # a round every 2 s: 40 s of it
        asyncio.run(round_over(watch, fleet, egress, [("cmp_w", "running", [])]))
    ((computer_id, event, message),) = fleet.records  # the first said, the rest the same kind
    assert (computer_id, event) == ("cmp_w", "network.error")
    assert message.startswith("egress is off: refused, take 0 ")


def test_a_host_that_cycles_its_error_classes_writes_a_few_events() -> None:
    classes = sorted({cls.__name__ for cls in _door_errors()})
    assert len(classes) > MOST_KINDS
    link, fleet = Link(), Fleet()
    _refusing(link, [{"type": name, "message": f"no: {name}"} for name in classes * 3])
    egress = _egress(link, {}, [])
    watch = FleetEgress(fleet, None, None, None, None, None)  # type: ignore[arg-type]
    for _ in range(len(classes) * 3):
        asyncio.run(round_over(watch, fleet, egress, [("cmp_c", "running", [])]))
    assert 1 <= len(fleet.records) <= MOST_KINDS, fleet.records


def _door_errors() -> list[type[HostError]]:
    """The classes a host's error may be raised again as, but the one that ends its round
    (`host_unreachable`: nothing is recorded for it)."""
    found, todo = [], [HostError]
    while todo:
        cls = todo.pop()
        if not issubclass(cls, HostUnreachableError):
            found.append(cls)
            todo.extend(cls.__subclasses__())
    return found


def test_a_failures_kind_is_its_roots_class_not_its_words() -> None:
    class Refused(HostError):
        code = "refused"

    inner = Refused("one text")
    inner.code = "another_code"  # a host's attributes may say what they like
    try:
        raise HostError("egress is off: one text") from inner
    except HostError as exc:
        wrapped = exc
    assert kind_of(wrapped) == kind_of(Refused("other words")) != kind_of(HostError("x"))


def test_a_kind_is_said_when_it_begins_and_again_only_after_the_window() -> None:
    said = SaidOnce()
    first, other = HostError("a"), ValueError("b")
    assert said.failed("cmp_1", first, 0.0)
    assert not said.failed("cmp_1", HostError("reworded"), 1.0)  # the same failure
    said.worked("cmp_1")
    assert not said.failed("cmp_1", first, 2.0)  # failing every other round: said lately
    assert said.failed("cmp_1", other, 3.0)  # another kind begins
    assert not said.failed("cmp_1", other, 4.0)
    assert said.failed("cmp_1", first, AGAIN_AFTER + 1.0)  # it began again, the window past
    assert said.failed("cmp_2", first, 5.0)  # each computer its own


def test_what_is_kept_is_bounded_and_forgets_the_gone() -> None:
    said = SaidOnce()
    kinds = [type(f"E{n}", (HostError,), {}) for n in range(MOST_KINDS * 3)]
    spoken = [said.failed("cmp_1", kind("x"), float(n)) for n, kind in enumerate(kinds)]
    assert spoken == [True] * MOST_KINDS + [False] * (MOST_KINDS * 2)
    assert len(said._said["cmp_1"]) == MOST_KINDS
    said.failed("cmp_gone", HostError("x"), 0.0)
    said.keep_only({"cmp_1"}, 100.0)
    assert len(said) == 1
    said.worked("cmp_1")
    said.keep_only({"cmp_1"}, AGAIN_AFTER * 2)  # nothing said within the window: nothing kept
    assert len(said) == 0
