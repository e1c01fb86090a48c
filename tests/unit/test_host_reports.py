"""What the control plane takes from a fleet host is that host's word about its own computers
only, and bounded: a counter it reports is a whole number or nothing; a figure for a computer
comes from the report of the host that runs it (another host's report naming it decides
nothing); a report or an answer that does not end, is too large or is not JSON makes the host
unreachable, never the API node's memory or time; files carried for a snapshot are kept under
the id the control plane named, not the one the sender wrote."""

from __future__ import annotations

import asyncio
import json
import ssl
import types
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from sanbox.control import host_sets
from sanbox.control.fleet_egress import FleetEgress
from sanbox.control.hosts import FleetHosts
from sanbox.fleet.link import link as link_mod
from sanbox.fleet.link import wire
from sanbox.fleet.link.link import HostLink, HostUnreachableError
from sanbox.host.errors import HostError
from sanbox.host.machines import carry
from sanbox.host.snapshot.transfer import SnapshotExport

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "counted"),
    [
        (5, 5),
        (0, 0),
        (-1, None),
        ("7", None),
        (1.5, None),
        (True, None),
        (1 << 63, None),
        (None, None),
    ],
)
def test_a_counter_is_a_whole_number_or_nothing(value: object, counted: int | None) -> None:
    assert wire.count(value) == counted


class Reporting:
    def __init__(self, cpu: dict[str, int]) -> None:
        self.cpu = cpu

    def cpu_usec(self, computer_id: str) -> int | None:
        return self.cpu.get(computer_id)


def test_a_computers_cpu_time_is_its_own_hosts_word() -> None:
    own, other = Reporting({}), Reporting({"cmp_x": 10**15})  # its VM stopped; a liar's figure
    hosts = SimpleNamespace(links={"h1": own, "h2": other})
    assert FleetHosts.cpu_usec(hosts, "cmp_x", own) is None  # type: ignore[arg-type]
    own.cpu["cmp_x"] = 40
    assert FleetHosts.cpu_usec(hosts, "cmp_x", own) == 40  # type: ignore[arg-type]
    assert FleetHosts.cpu_usec(hosts, "cmp_x") is None  # type: ignore[arg-type]  # two say
    del own.cpu["cmp_x"]
    assert FleetHosts.cpu_usec(hosts, "cmp_x") == 10**15  # type: ignore[arg-type]  # one says


class Carrying:
    def __init__(self, carried: dict[str, int]) -> None:
        self.figures = carried

    def carried(self, computer_id: str) -> int | None:
        return self.figures.get(computer_id)


def test_a_computers_egress_bytes_are_its_own_hosts_word() -> None:
    own, other = object(), object()
    egress = SimpleNamespace(
        _held={"h1": (own, Carrying({"cmp_x": 5})), "h2": (other, Carrying({"cmp_x": 10**12}))}
    )
    assert FleetEgress.carried(egress, "cmp_x", own) == 5  # type: ignore[arg-type]
    assert FleetEgress.carried(egress, "cmp_x") is None  # type: ignore[arg-type]


def _link(handler: Any) -> HostLink:
    link = HostLink("h1", "https://h1.test:7443", ("h1.test", 7444), ssl.create_default_context())
    link._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return link


def _listing(**lists: Any) -> bytes:
    return json.dumps({"epoch": "1", **lists}).encode()


MANY = wire.MOST_HELD + 1


@pytest.mark.parametrize(
    "body",
    [
        b"x" * (link_mod.MOST_REPORT + 1),
        b"not json",
        b"[" * 5000,
        b"[1, 2]",
        b'{"no": "epoch"}',
        _listing(computers={f"cmp_{n}": {"liveness": "dead"} for n in range(MANY)}),
        _listing(snapshots=[f"snp_{n:08d}" for n in range(MANY)]),
        _listing(builds=[{"build_id": f"b{n}"} for n in range(MANY)]),
        _listing(egress={"computers": {f"cmp_{n}": {} for n in range(MANY)}, "denials": 0}),
        _listing(computers=["cmp_1"]),
        _listing(snapshots={"snp_01": 1}),
        _listing(egress=[]),
    ],
    ids=[
        "too-large",
        "not-json",
        "too-deep",
        "not-an-object",
        "no-epoch",
        "too-many-computers",
        "too-many-snapshots",
        "too-many-builds",
        "too-many-egresses",
        "computers-not-an-object",
        "snapshots-not-a-list",
        "egress-not-an-object",
    ],
)
def test_a_report_that_is_not_one_makes_the_host_unreachable(body: bytes) -> None:
    """A report is read whole within bounds, and lists at most `MOST_HELD` computers, snapshots,
    builds and egresses: each is looked up in the records when the host is told its set, so a host
    listing ids without end is not believed (before, any number was taken in)."""
    link = _link(lambda request: httpx.Response(200, content=body))

    async def scenario() -> None:
        with pytest.raises(HostUnreachableError):
            await link.refresh()
        assert not link.reachable

    asyncio.run(scenario())


def test_a_report_at_its_bounds_is_taken() -> None:
    body = _listing(snapshots=[f"snp_{n:08d}" for n in range(wire.MOST_HELD)], computers={})
    link = _link(lambda request: httpx.Response(200, content=body))
    assert len(asyncio.run(link.refresh())["snapshots"]) == wire.MOST_HELD


def test_an_answer_that_trickles_is_cut_at_the_calls_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(link_mod, "CALL_DEADLINE", 0.5)

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"value": "'
        while True:
            await asyncio.sleep(0.05)
            yield b"x"

    link = _link(lambda request: httpx.Response(200, content=trickle()))

    async def scenario() -> None:
        async with asyncio.timeout(10):
            with pytest.raises(HostUnreachableError, match="did not end its answer"):
                await link.call("ping")

    asyncio.run(scenario())


def test_an_answer_that_is_no_object_is_no_value() -> None:
    link = _link(lambda request: httpx.Response(200, content=b"[]"))
    with pytest.raises(HostUnreachableError, match="no object"):
        asyncio.run(link.call("ping"))


def test_carried_files_of_another_snapshot_are_refused(tmp_path: Path) -> None:
    snapshots = SimpleNamespace(data_dir=SimpleNamespace(snapshot=lambda sid: tmp_path / sid))
    export = SnapshotExport(snapshot={"id": "snp_other"}, saved=None)

    async def nothing() -> AsyncIterator[bytes]:
        yield b""

    with pytest.raises(HostError, match="another snapshot"):
        asyncio.run(carry.import_snapshot(snapshots, "snp_named", export, None, nothing()))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_report_that_cannot_be_taken_in_ends_that_hosts_renewal_only() -> None:
    """A report that reads as one but is wrong inside (`capacity_of` meets a missing key) is
    that host's lease not renewed: the round goes on (before, it raised out of the watch's
    gather and the sweep of every host was skipped, round after round)."""

    class Lying:
        async def refresh(self) -> dict[str, Any]:
            return {"epoch": "1"}

    async def linked(_row: object) -> Lying:
        return Lying()

    hosts = SimpleNamespace(_link=linked, _epochs={}, _silent={}, _settled={}, answer_within=1.0)
    hosts._renewed = types.MethodType(FleetHosts._renewed, hosts)
    row = SimpleNamespace(name="h-bad", id="hst_bad")
    asyncio.run(FleetHosts._renew(hosts, row))  # type: ignore[arg-type]
    assert hosts._epochs == {}  # nothing of it was taken


def test_a_hosts_error_is_kept_short_and_plain() -> None:
    """A host's error message goes into logs and events (`network.error`): what is kept of it is
    cut to 1 KiB, as are its code and attributes; an attribute that is not a plain value, or a
    name that is not a plain one, is not set (before, a message of up to 64 MiB was kept whole)."""
    exc = wire.error_in(
        {
            "type": "HostError",
            "code": "c" * 5000,
            "message": "m" * (4 << 20),
            "attrs": {"detail": "d" * 5000, "count": 3, "__class__": "x", "held": [1, 2]},
        }
    )
    assert len(str(exc)) == len(exc.code) == len(exc.detail) == wire.MOST_SAID  # type: ignore[attr-defined]
    assert str(exc).endswith("…") and exc.count == 3  # type: ignore[attr-defined]
    assert type(exc) is HostError and not hasattr(exc, "held")
    short = wire.error_in({"type": "HostUnreachableError", "message": "gone", "attrs": []})
    assert isinstance(short, HostUnreachableError) and str(short) == "gone"


def test_a_host_is_told_its_set_one_at_a_time_and_again_when_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One settle at a time per host (a newer report waits for the one that runs); told again
    once its last failed and `SETTLE_GAP` has passed, or once `SETTLE_EVERY` has passed."""
    sets = host_sets.HostSets(SimpleNamespace())  # type: ignore[arg-type]
    told: list[int] = []
    go = asyncio.Event()

    async def settle(_row: object, _link: object, report: dict[str, Any]) -> None:
        told.append(report["n"])
        await go.wait()
        if report["n"] == 3:
            raise HostError("held")

    sets.settle = settle  # type: ignore[method-assign,assignment]
    row = SimpleNamespace(name="h1")

    async def main() -> None:
        for n in (1, 2, 3):  # 2 is replaced by 3 while 1 runs
            sets.tell(row, None, {"n": n}, 1)  # type: ignore[arg-type]
            await asyncio.sleep(0)
        assert told == [1] and not sets.due("h1", 1, False)
        go.set()
        await sets._tasks["h1"]
        assert told == [1, 3] and not sets.due("h1", 1, False)  # the last failed: a gap first
        monkeypatch.setattr(host_sets, "SETTLE_GAP", 0.0)
        assert sets.due("h1", 1, False)
        sets.tell(row, None, {"n": 4}, 1)  # type: ignore[arg-type]
        await sets._tasks["h1"]
        assert not sets.due("h1", 1, False)
        monkeypatch.setattr(host_sets, "SETTLE_EVERY", 0.0)
        await asyncio.sleep(0.01)
        assert sets.due("h1", 1, False)

    asyncio.run(main())
