"""Fleet hosts that do not play fair (real host agents over mutual TLS, on the local driver), and
what they cannot do to the control plane or the other hosts:
- a host that holds its answers while its reports keep coming (it seems to restart at every
  report, names a snapshot no record has, and never answers the call to delete it) holds back
  its own settle only: the hosts' watch goes on every round, and the other hosts stay up;
- a host that answers a carry it takes with a body that never ends is cut at the answer's bound:
  the move fails, the computer stays where it was, and its operation ends (it is not busy)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Mount, Route

from sanbox import Sanbox
from sanbox.fleet.link import link
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk.errors import SanboxError

from .conftest import LiveServer, fake_image
from .test_host_link import (
    _free_port,
    _hosts,
    _serving,
    _until,
    _wait_until_up,
    join_host,
    serving_fleet,
)

pytestmark = pytest.mark.component
MADE_UP = "snp_madeup0000000000"  # a snapshot no record names


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=4.0)


class _Unanswering(HostRuntime):
    """A host that never answers a call to delete a snapshot (until released)."""

    released = threading.Event()
    asked = 0

    async def delete_snapshot(self, snapshot_id: str) -> None:
        type(self).asked += 1
        while not self.released.is_set():
            await asyncio.sleep(0.05)


class _Restarting(HostAgent):
    """A host whose every report names a new process epoch and a snapshot no record has."""

    reports = 0

    def report(self) -> dict[str, Any]:
        found = super().report()
        self.reports += 1
        found["epoch"] = f"{self.epoch}-{self.reports}"
        found["snapshots"] = [*found["snapshots"], MADE_UP]
        return found


class _Endless(HostAgent):
    """A host that takes a carry's bytes whole, then answers with a body that never ends (it
    ends after 256 MiB here, so that the code before the bound, which read it all, ends too)."""

    def app(self) -> Starlette:
        async def take(request: Request) -> StreamingResponse:
            async for _ in request.stream():
                pass
            return StreamingResponse(_spaces(256 << 20))

        own = Route("/v1/host/imports/{kind}/{item_id}", take, methods=["PUT"])
        return Starlette(routes=[own, Mount("", super().app())])


async def _spaces(total: int) -> AsyncIterator[bytes]:
    chunk = b" " * (64 << 10)
    for _ in range(total // len(chunk)):
        yield chunk
        await asyncio.sleep(0.01)


def _runtime(host_dir: Path, kind: type[HostRuntime] = HostRuntime) -> HostRuntime:
    fake_image(DataDir(host_dir))
    return kind(DataDir(host_dir), LocalDriver(), networking=False)


def _served(live: LiveServer, short_tmp: Path, agents: dict[str, Any]) -> ExitStack:
    """Each of `agents` (name -> a function making its agent from its data dir) joined and
    served; left, they stop."""
    stack = ExitStack()
    control = FleetCAs(live.data_dir.root / "fleet").control_identity()
    for name, make in agents.items():
        host_dir, port = short_tmp / name, _free_port()
        join_host(live, host_dir, port, name)
        me = host_identity(DataDir(host_dir).host / "fleet")
        stack.enter_context(_serving(make(host_dir), port, me))
        _wait_until_up(f"https://127.0.0.1:{port}", control)
    return stack


def test_a_host_that_holds_its_settle_holds_back_no_other_hosts_lease(
    fleet_server: LiveServer, short_tmp: Path
) -> None:
    live = fleet_server
    agents = {
        "h1": lambda d: HostAgent(_runtime(d)),
        "h2": lambda d: HostAgent(_runtime(d)),
        "h3": lambda d: _Restarting(_runtime(d, _Unanswering)),
    }
    try:
        with _served(live, short_tmp, agents):
            _until("three hosts up", lambda: {h.state for h in _hosts(live)} == {"up"})
            _until("h3 asked to delete the snapshot", lambda: _Unanswering.asked > 0)
            start = {h.name: h.epoch for h in _hosts(live)}["h3"]
            seen: list[tuple[str, str]] = []

            def rounds_go_on() -> bool:
                hosts = {h.name: h for h in _hosts(live)}
                seen.append((hosts["h1"].state, hosts["h2"].state))
                return hosts["h3"].epoch >= start + 25  # a round each, longer than lost_after

            _until("the watch's rounds going on", rounds_go_on, timeout=30)
            assert set(seen) == {("up", "up")}, "another host's lease waited for h3"
            assert _Unanswering.asked <= 2, "h3 was settled again beside its held settle"
    finally:
        _Unanswering.released.set()


def test_a_carry_answered_without_end_is_cut_and_the_computer_is_free(
    fleet_server: LiveServer, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link, "MOST_ANSWER", 1 << 20)  # the bound, scaled down
    live = fleet_server
    agents = {
        "h1": lambda d: HostAgent(_runtime(d)),
        "h2": lambda d: _Endless(_runtime(d)),
    }
    with (
        _served(live, short_tmp, agents),
        Sanbox(live.url, live.key, timeout=30) as client,
    ):
        _until("both hosts up", lambda: {h.state for h in _hosts(live)} == {"up"})
        client.fleet.drain("h2")
        c = client.computers.create(name="mover", idle_timeout=0)
        client.fleet.drain("h2", False)
        c.stop()
        with pytest.raises(SanboxError) as cut:
            c.move("h2")
        assert cut.value.code == "host_unreachable" and "1 MiB" in str(cut.value), cut.value
        assert c.refresh().state == "stopped"
        assert (short_tmp / "h1" / "computers" / c.id).is_dir(), "it did not stay where it was"
        c.start()  # not busy: the move's operation ended
        assert c.exec("true").exit_code == 0
        c.delete()
