"""A fleet host's side of egress over the link, without namespaces: every call checks what it is
sent before anything is started (a computer id, rules parsed again and checked by the host's own
reach, a handover, a namespace that must exist here), `egress_denials` answers what waits and
what was dropped; the gateway is made from the host's own settings; and the control plane's
watch runs at once when poked (a secret changed), from any thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, cast

import pytest

from sanbox.control.fleet_egress import FleetEgress
from sanbox.fleet.link.host_egress import CALLS, DenialQueue, HostEgress
from sanbox.host.egress.denials import Denial
from sanbox.host.egress.policy import Policy, PolicyError
from sanbox.host.egress.resolver import Resolver
from sanbox.host.errors import HostError
from sanbox.host.net import Network
from sanbox.host.settings import HostSettings, SettingsError

pytestmark = pytest.mark.unit


def _egress(tmp_path: Path, queue: DenialQueue | None = None) -> HostEgress:
    network = Network(tmp_path, "unit")
    return HostEgress(network, Resolver(("127.0.0.1", 53)), queue=queue)


def called(name: str, egress: HostEgress) -> Any:
    """The answer of call `name` with no arguments (an `async def`: CALLS types it Awaitable)."""
    return asyncio.run(cast("Coroutine[Any, Any, Any]", CALLS[name](egress, {})))


def test_every_call_is_checked_before_anything_starts(tmp_path: Path) -> None:
    egress = _egress(tmp_path)
    start = CALLS["egress_start"]
    good = {"computer_id": "cmp_nowhere", "org_id": "org_1", "rules": ["a.test"], "secrets": None}

    async def scenario() -> None:
        with pytest.raises(ValueError, match="computer_id"):
            await start(egress, {**good, "computer_id": "../../etc"})
        with pytest.raises(PolicyError):
            await start(egress, {**good, "rules": ["127.0.0.0/8:22"]})  # the host's own reach
        with pytest.raises(ValueError, match="secrets"):
            await start(egress, {**good, "secrets": {"injections": []}})
        with pytest.raises(ValueError, match="org_id"):
            await start(egress, {**good, "org_id": "org 1"})
        with pytest.raises(HostError, match="no network namespace"):
            await start(egress, good)
        with pytest.raises(HostError, match="does not run"):
            await CALLS["egress_secrets"](egress, {"computer_id": "cmp_nowhere", "secrets": None})
        assert await CALLS["egress_update"](egress, good) == 0  # nothing runs: nothing closed
        await CALLS["egress_stop"](egress, good)  # stopping what does not run is no error

    asyncio.run(scenario())
    assert egress.report() == {"computers": {}, "denials": 0}
    assert egress.policy_of(["b.test", "a.test"]) == Policy.of(["a.test", "b.test"])


def test_denials_are_answered_with_what_was_dropped(tmp_path: Path) -> None:
    egress = _egress(tmp_path, DenialQueue(bound=2))
    for name in ("one.test", "two.test", "three.test"):
        egress.denials.put("cmp_1", Denial(name, 443, "not in the allowlist"))
    assert egress.report()["denials"] == 2
    answer = called("egress_denials", egress)
    assert [d["name"] for d in answer["denials"]] == ["two.test", "three.test"]
    assert answer["dropped"] == {"cmp_1": 1}
    assert called("egress_denials", egress) == {"denials": [], "dropped": {}}


def test_a_poke_runs_the_watch_at_once_from_any_thread() -> None:
    rounds: list[float] = []

    class Counted(FleetEgress):
        async def check(self) -> None:
            rounds.append(time.monotonic())

    watch = Counted(None, None, None, None, None, None)  # type: ignore[arg-type]
    watch.poke()  # before the watch runs: nothing to wake, no error

    async def scenario() -> None:
        task = asyncio.ensure_future(watch.watch(60.0))
        try:
            while not rounds:
                await asyncio.sleep(0.01)
            poker = threading.Thread(target=watch.poke)
            poker.start()
            poker.join()
            async with asyncio.timeout(5):
                while len(rounds) < 2:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    assert len(rounds) == 2 and rounds[1] - rounds[0] < 5


def test_a_host_serves_its_egress_from_its_own_settings(tmp_path: Path) -> None:
    settings = HostSettings.from_env(
        {
            "SANBOX_UPSTREAM_DNS": "192.0.2.53:5353",
            "SANBOX_TENANT_PRIVATE_RANGES": "10.20.0.0/16",
            "SANBOX_EGRESS_MAX_CONNECTIONS": "64",
            "SANBOX_EGRESS_MAX_CONNECTIONS_PER_ORG": "128",
            "SANBOX_EGRESS_MAX_CONNECTIONS_TOTAL": "256",
        }
    )
    egress = HostEgress.of(Network(tmp_path, "unit"), settings)
    gateway = egress.gateway
    assert gateway.resolver.upstream == ("192.0.2.53", 5353)
    assert gateway.max_connections == 64
    assert (gateway.budget.per_org, gateway.budget.total) == (128, 256)
    assert egress.policy_of(["10.20.0.0/24:5432"]).cidrs  # the operator's range opens there
    with pytest.raises(PolicyError):
        egress.policy_of(["10.30.0.0/24:5432"])
    for bad in ("0", "-1", "many"):
        with pytest.raises(SettingsError, match="SANBOX_EGRESS_MAX_CONNECTIONS"):
            HostSettings.from_env({"SANBOX_EGRESS_MAX_CONNECTIONS": bad})
    assert HostSettings.from_env({}).upstream is None  # the system's resolver
