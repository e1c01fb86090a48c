"""Every computer's egress proxy counts its connections in one shared budget: a connection of an
org over its cap is closed at accept and reported as a denial (`*`), while another org's proxy
still takes connections. Loopback sockets stand for the namespaces' listeners."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sanbox.host.egress.budget import ConnectionBudget
from sanbox.host.egress.policy import Policy
from sanbox.host.egress.proxy import EgressProxy
from sanbox.host.egress.resolver import Resolver

pytestmark = pytest.mark.component


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    return sock


def test_an_org_over_its_budget_is_closed_at_accept_and_another_org_goes_on() -> None:
    async def scenario() -> None:
        budget = ConnectionBudget(per_org=2, total=100)
        denied: dict[str, list[tuple[str, int, str]]] = {"a": [], "b": []}
        proxies = {}
        for org in ("a", "b"):
            proxy = EgressProxy(
                Policy,
                Resolver(("127.0.0.1", 9)),
                lambda *d, o=org: denied[o].append(d),
                budget=budget,
                org=org,
            )
            socks = [listener(), listener(), listener()]
            await proxy.serve(*socks)
            proxies[org] = (proxy, socks[0].getsockname()[1])
        assert budget.take("a") is None and budget.take("a") is None  # org a's other computers
        for org in ("a", "b"):
            reader, writer = await asyncio.open_connection("127.0.0.1", proxies[org][1])
            assert await reader.read() == b""  # closed (a: at accept; b: not a redirected one)
            writer.close()
        await proxies["b"][0].close()
        await proxies["a"][0].close()
        assert denied["a"] == [("*", 80, "over the org's cap of 2 open egress connections")]
        assert denied["b"] == []
        assert budget.open("a") == 2 and budget.open("b") == 0  # b's connection was given back

    asyncio.run(scenario())
