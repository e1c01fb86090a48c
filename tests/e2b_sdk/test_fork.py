"""`fork()` through E2B's SDKs: the forks as sandboxes of their own, and a fork refused as a raised
exception (E2B's API answers a request that made no fork with an error status).

The stand-in guest (a local process) cannot be stopped for a copy of its memory: the forks here
are of a sandbox paused without memory (a Sanbox stop), which boot on a copy of its disk."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox
from e2b.exceptions import SandboxException, SandboxNotFoundException

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


def test_fork_gives_running_sandboxes(e2b_server: E2bServer) -> None:
    source = Sandbox.create("base", envs=e2b_server.envs, metadata={"suite": "fork"})
    try:
        assert source.pause(mode="filesystem")
        forks = Sandbox.fork(source.sandbox_id, count=2, timeout=60)
        assert all(isinstance(f, Sandbox) for f in forks), forks
        ids = {f.sandbox_id for f in forks if isinstance(f, Sandbox)}
        assert len(ids) == 2 and source.sandbox_id not in ids
        for fork in forks:
            assert isinstance(fork, Sandbox)
            assert fork.commands.run("echo from the fork").stdout == "from the fork\n"
            assert fork.get_info().metadata == {"suite": "fork"}
            fork.kill()
    finally:
        Sandbox.kill(source.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.fork(source.sandbox_id)


def test_a_refused_fork_raises(e2b_server: E2bServer) -> None:
    admin = {"Authorization": f"Bearer {e2b_server.key}"}
    url = e2b_server.url
    httpx.post(f"{url}/v1/orgs", json={"name": "forkquota"}, headers=admin).raise_for_status()
    made = httpx.post(f"{url}/v1/keys", json={"org": "forkquota"}, headers=admin)
    made.raise_for_status()
    key = made.json()["key"]
    quota = httpx.put(f"{url}/v1/orgs/forkquota/quota", json={"running": 1}, headers=admin)
    quota.raise_for_status()
    source = Sandbox.create("base", envs=e2b_server.envs, api_key=key)
    try:
        with pytest.raises(SandboxException, match="403"):
            source.fork()
        with pytest.raises(SandboxException, match="403"):
            asyncio.run(AsyncSandbox.fork(source.sandbox_id, api_key=key))
        assert [s.sandbox_id for s in Sandbox.list(api_key=key).next_items()] == [source.sandbox_id]
    finally:
        source.kill()
