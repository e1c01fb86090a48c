"""A computer's namespace made by `Network.ensure` with real iproute2 (its steps in one
`ip -batch`): what it sets, made again when a part is gone, and a step that fails named."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from sanbox.host.net import Network, netns
from sanbox.host.net.addresses import GATEWAY_CIDR, GATEWAY_MAC, TAP
from sanbox.host.net.netns import NetworkError, ip, netns_exists

pytestmark = pytest.mark.integration


def _network(tmp_path: Path) -> Network:
    return Network(tmp_path, "t" + secrets.token_hex(3))


async def _state(ns: str) -> tuple[str, str]:
    return await ip("-n", ns, "-o", "link", "show"), await ip("-n", ns, "-o", "addr", "show")


def test_a_namespace_is_made_with_its_tap_and_made_again_when_the_tap_is_gone(
    tmp_path: Path,
) -> None:
    network = _network(tmp_path)

    async def run() -> None:
        made = await network.ensure("c1")
        try:
            assert made.netns is not None and netns_exists(made.netns)
            links, addrs = await _state(made.netns)
            assert "lo: <LOOPBACK,UP" in links
            assert f"{TAP}: <" in links and ",UP" in links.split(f"{TAP}: <")[1].split(">")[0]
            assert GATEWAY_MAC in links and f"inet {GATEWAY_CIDR}" in addrs
            assert (await network.ensure("c1")).netns == made.netns  # idempotent
            assert await _state(made.netns) == (links, addrs)
            await ip("-n", made.netns, "link", "del", TAP)  # a part gone: made again
            await network.ensure("c1")
            again_links, again_addrs = await _state(made.netns)
            assert GATEWAY_MAC in again_links and f"inet {GATEWAY_CIDR}" in again_addrs
        finally:
            await network.remove("c1")
        assert not netns_exists(made.netns)

    asyncio.run(run())


def test_a_step_that_fails_is_an_error_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    network = _network(tmp_path)
    monkeypatch.setattr(netns, "TAP", "t" * 20)  # longer than a link name may be

    async def run() -> None:
        try:
            with pytest.raises(NetworkError) as raised:
                await network.ensure("c1")
            assert "-batch" in str(raised.value) and "tuntap add" in str(raised.value)
        finally:
            await network.remove("c1")
        assert not netns_exists(network.netns("c1"))

    asyncio.run(run())
