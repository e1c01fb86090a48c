"""MCP sessions are bounded per org as well as per key: an org may make any number of keys, so
the per-key bound alone let one org fill the server's session table for everyone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sanbox.mcp.http import McpEndpoint

from .conftest import LiveServer, local_app, served
from .test_mcp import ACCEPT, INITIALIZE

pytestmark = pytest.mark.component


@pytest.fixture
def small(short_tmp: Path) -> Iterator[LiveServer]:
    """A live server whose keys hold 2 MCP sessions each and whose orgs 3."""
    app, dd = local_app(short_tmp, mcp_sessions_per_key=2, mcp_sessions_per_org=3)
    with served(app) as url:
        yield LiveServer(url, app.state.first_key, dd)


def test_an_org_holds_a_bounded_number_of_mcp_sessions(small: LiveServer) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=small.url, timeout=30) as api:
            admin = {"Authorization": f"Bearer {small.key}"}

            async def key(org: str | None = None) -> dict[str, str]:
                body = {"name": "k"} if org is None else {"name": "k", "org": org}
                made = await api.post("/v1/keys", json=body, headers=admin)
                assert made.status_code == 201, made.text
                return {"Authorization": f"Bearer {made.json()['key']}"}

            async def opened(headers: dict[str, str]) -> httpx.Response:
                return await api.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})

            a, b, c = await key(), await key(), await key()
            assert (await api.post("/v1/orgs", json={"name": "other"}, headers=admin)).is_success
            theirs = await key("other")
            held = [await opened(a), await opened(a), await opened(b)]  # the org's three
            assert [r.status_code for r in held] == [200, 200, 200]
            for headers in (b, c):  # keys with room of their own: the org has none
                refused = await opened(headers)
                assert refused.status_code == 429 and "mcp-session-id" not in refused.headers
                assert refused.json()["error"]["code"] == "too_many_sessions"
                assert "org's keys hold 3 MCP sessions" in refused.json()["error"]["message"]
                assert refused.headers["retry-after"]
            assert (await opened(theirs)).status_code == 200  # another org is untouched
            ended = await api.delete(
                "/mcp",
                headers={
                    **a,
                    "Mcp-Session-Id": held[0].headers["mcp-session-id"],
                    "Mcp-Protocol-Version": "2025-06-18",
                },
            )
            assert ended.status_code == 200
            assert (await opened(c)).status_code == 200  # ending one made room

    asyncio.run(scenario())


def test_each_api_node_holds_its_share_of_the_bounds(short_tmp: Path) -> None:
    """With several API nodes each holds its share of a key's and an org's sessions (as of the
    request rates), so the nodes together hold about the bound, not the bound each."""
    app, dd = local_app(short_tmp, mcp_sessions_per_key=2, mcp_sessions_per_org=3)
    [mcp] = [
        getattr(r, "endpoint", None) for r in app.router.routes if getattr(r, "path", "") == "/mcp"
    ]
    assert isinstance(mcp, McpEndpoint)
    mcp.share.set(2)  # as `fleet/api_nodes.py` sets it with two nodes alive

    async def scenario(url: str, first_key: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as api:
            admin = {"Authorization": f"Bearer {first_key}"}
            made = await api.post("/v1/keys", json={"name": "k"}, headers=admin)
            a = {"Authorization": f"Bearer {made.json()['key']}"}
            first = await api.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **a})
            assert first.status_code == 200, first.text
            refused = await api.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **a})
            assert refused.status_code == 429
            said = refused.json()["error"]["message"]
            assert "on this API node (its share of 2, shared by 2 API nodes)" in said, said

    with served(app) as url:
        asyncio.run(scenario(url, app.state.first_key))
