"""Fleet hosts that do not play fair (real host agents over mutual TLS, on the local driver), and
what they cannot do to the control plane or the other hosts:
- a host that answers a carry it takes with a body that never ends is cut at the answer's bound:
  the move fails, the computer stays where it was, and its operation ends (it is not busy)."""

from __future__ import annotations

import asyncio
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


@pytest.fixture
def fleet_server(short_tmp: Path) -> Iterator[LiveServer]:
    yield from serving_fleet(short_tmp, lease=2.0, lost_after=4.0)


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
