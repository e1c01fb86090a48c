"""The MCP server, driven by the `mcp` package's own client through both doors: streamable HTTP at
`/mcp` on the real server (with the key, and refused without it), and `sanbox mcp` over stdio as
a subprocess pointed at that server, the way an MCP client configures it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from .conftest import LiveServer

pytestmark = pytest.mark.component

INITIALIZE = {  # an MCP session's first request, made by hand
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}

SANBOX = Path(sys.executable).parent / "sanbox"  # the console script an MCP client runs
TOOLS = {
    "list_computers",
    "get_computer",
    "create_computer",
    "start_computer",
    "stop_computer",
    "pause_computer",
    "resume_computer",
    "delete_computer",
    "exec",
    "read_file",
    "write_file",
    "list_files",
    "publish_port",
    "snapshot_computer",
    "list_snapshots",
    "delete_snapshot",
    "fork_computer",
    "list_secrets",
    "bind_secret",
    "unbind_secret",
}


@asynccontextmanager
async def over_http(url: str, key: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(live: LiveServer, config: Path) -> AsyncIterator[ClientSession]:
    """`sanbox mcp` as a subprocess, finding the server and key in its config file."""
    config.write_text(f'url = "{live.url}"\napi_key = "{live.key}"\n')
    env = {"SANBOX_CONFIG": str(config), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    params = StdioServerParameters(command=str(SANBOX), args=["mcp"], env=env)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    return result


def text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def computer_work(session: ClientSession, name: str, folder: Path) -> None:
    """Create, exec, write and read back (text and binary), list: what both doors must do."""
    created = await call(session, "create_computer", name=name)
    assert not created.is_error, text(created)
    assert structured(created)["computer"]["state"] == "running"
    assert f"{name} (cmp_" in text(created) and "running" in text(created)

    ran = await call(session, "exec", computer=name, cmd="echo hi")
    assert not ran.is_error, text(ran)
    assert structured(ran)["stdout"] == "hi\n" and structured(ran)["exit_code"] == 0
    assert "exit code 0" in text(ran) and "hi" in text(ran)
    ran = await call(session, "exec", computer=name, cmd=["sh", "-c", "echo oops >&2; exit 3"])
    assert (structured(ran)["exit_code"], structured(ran)["stderr"]) == (3, "oops\n")
    # input as bytes (not UTF-8: a gzip, a tar), written base64
    fed = await call(
        session, "exec", computer=name, cmd="od -An -tx1", stdin="AP+A", stdin_encoding="base64"
    )
    assert structured(fed)["stdout"].split() == ["00", "ff", "80"], text(fed)
    bad = await call(
        session, "exec", computer=name, cmd="true", stdin="%%", stdin_encoding="base64"
    )
    assert bad.is_error and structured(bad)["error"]["code"] == "validation_error"

    path = f"{folder}/notes/hello.txt"
    wrote = await call(session, "write_file", computer=name, path=path, content="héllo\n")
    assert not wrote.is_error, text(wrote)
    assert structured(wrote)["size"] == len("héllo\n".encode())
    read = await call(session, "read_file", computer=name, path=path)
    assert structured(read) == {
        "path": path,
        "size": 7,
        "encoding": "utf-8",
        "content": "héllo\n",
    }
    blob = f"{folder}/notes/blob.bin"
    await call(session, "write_file", computer=name, path=blob, content="AP8=", encoding="base64")
    read = await call(session, "read_file", computer=name, path=blob)
    assert (structured(read)["encoding"], structured(read)["content"]) == ("base64", "AP8=")

    listed = await call(session, "list_files", computer=name, path=f"{folder}/notes")
    assert sorted(e["name"] for e in structured(listed)["entries"]) == ["blob.bin", "hello.txt"]

    # a flood of output or a huge file does not flood the model's context
    flood = await call(session, "exec", computer=name, cmd="yes | head -c 200000")
    assert len(structured(flood)["stdout"]) == 64 * 1024 and structured(flood)["stdout_truncated"]
    assert "stdout truncated" in text(flood) and len(text(flood)) < 70_000
    big = f"{folder}/notes/big.bin"
    await call(session, "exec", computer=name, cmd=f"head -c 2000000 /dev/zero > {big}")
    refused = await call(session, "read_file", computer=name, path=big)
    assert refused.is_error and structured(refused)["error"]["code"] == "file_too_large"


def test_mcp_over_http(live_server: LiveServer, short_tmp: Path) -> None:
    async def scenario() -> None:
        async with over_http(live_server.url, live_server.key) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == TOOLS
            for name in ("list_computers", "get_computer", "read_file", "list_files"):
                hints = tools[name].annotations
                assert hints and hints.read_only_hint, name
            for name in ("delete_computer", "stop_computer", "exec", "write_file"):
                hints = tools[name].annotations
                assert hints and not hints.read_only_hint and hints.destructive_hint, name
            hints = tools["create_computer"].annotations
            assert hints and hints.destructive_hint is False and not hints.read_only_hint

            await computer_work(session, "mcp-http", short_tmp)

            listed = await call(session, "list_computers")
            assert [c["name"] for c in structured(listed)["computers"]] == ["mcp-http"]
            # the API's own errors, with their codes
            missing = await call(session, "get_computer", computer="nope")
            assert missing.is_error and structured(missing)["error"]["code"] == "computer_not_found"
            assert text(missing).startswith("error (computer_not_found)")
            bad = await call(session, "create_computer", name="NOT A NAME")
            assert bad.is_error and structured(bad)["error"]["code"] == "invalid_name"

            stopped = await call(session, "stop_computer", computer="mcp-http")
            assert structured(stopped)["computer"]["state"] == "stopped"
            refused = await call(session, "exec", computer="mcp-http", cmd="true")
            assert structured(refused)["error"]["code"] == "computer_not_running"

            # keep it, make a computer of what was kept, fork it
            no_memory = await call(session, "snapshot_computer", computer="mcp-http", memory=True)
            assert structured(no_memory)["error"]["code"] == "invalid_transition"
            snap = await call(session, "snapshot_computer", computer="mcp-http", name="kept")
            assert structured(snap)["snapshot"]["name"] == "kept", text(snap)
            assert "disk only" in text(snap)
            listed = await call(session, "list_snapshots")
            assert [s["name"] for s in structured(listed)["snapshots"]] == ["kept"]
            again = await call(session, "create_computer", name="again", from_snapshot="kept")
            assert structured(again)["computer"]["origin"] == structured(snap)["snapshot"]["id"]
            await call(session, "stop_computer", computer="again")  # (no QEMU to fork memory of)
            forks = await call(session, "fork_computer", computer="again", count=2, name="try")
            assert [c["name"] for c in structured(forks)["computers"]] == ["try-1", "try-2"]
            for name in ("again", "try-1", "try-2"):
                assert not (await call(session, "delete_computer", computer=name)).is_error
            gone = await call(session, "delete_snapshot", snapshot="kept")
            assert not gone.is_error, text(gone)
            missing = await call(session, "delete_snapshot", snapshot="kept")
            assert structured(missing)["error"]["code"] == "snapshot_not_found"
            deleted = await call(session, "delete_computer", computer="mcp-http")
            assert not deleted.is_error, text(deleted)

        # the calls went through the API: audited under the key that made them
        async with httpx.AsyncClient(
            base_url=live_server.url, headers={"Authorization": f"Bearer {live_server.key}"}
        ) as api:
            records = (await api.get("/v1/audit")).json()["records"]
        actions = {r["action"] for r in records if r["key_prefix"] == live_server.key[:12]}
        assert {"POST /v1/computers", "POST /v1/computers/{ref}/exec"} <= actions, actions

    asyncio.run(scenario())
    assert live_server.data_dir.computer_ids() == []


@pytest.mark.parametrize("key", [None, "sbk_wrong", "not-even-a-key"])
def test_mcp_over_http_refuses_a_request_without_a_valid_key(
    live_server: LiveServer, key: str | None
) -> None:
    """No MCP session is opened and nothing runs: the API's 401, before the protocol starts."""
    initialize = INITIALIZE
    create = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "create_computer", "arguments": {"name": "intruder"}},
    }
    headers = dict(ACCEPT)
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    with httpx.Client(base_url=live_server.url, headers=headers) as http:
        for message in (initialize, create):
            response = http.post("/mcp", json=message)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
            assert "mcp-session-id" not in response.headers
    with httpx.Client(base_url=live_server.url) as api:
        listed = api.get("/v1/computers", headers={"Authorization": f"Bearer {live_server.key}"})
    assert listed.json()["computers"] == []
    assert live_server.data_dir.computer_ids() == []


def test_the_server_starts_without_the_mcp_library() -> None:
    """Its modules are ~0.5 s of a server's start: they load at the first authenticated request
    to /mcp (the tests above: the first of each server's)."""
    code = "import sys, sanbox.api.app; print([m for m in sys.modules if m.split('.')[0] == 'mcp'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


def test_an_mcp_session_answers_only_the_key_that_opened_it(live_server: LiveServer) -> None:
    """Another valid key (here: of another org) that presents a session id gets no session."""

    async def scenario() -> tuple[int, int]:
        async with httpx.AsyncClient(base_url=live_server.url) as api:
            admin = {"Authorization": f"Bearer {live_server.key}"}
            await api.post("/v1/orgs", json={"name": "other"}, headers=admin)
            made = await api.post("/v1/keys", json={"org": "other"}, headers=admin)
            other_key = made.json()["key"]
            headers = ACCEPT
            opened = await api.post("/mcp", json=INITIALIZE, headers={**headers, **admin})
            session_id = opened.headers["mcp-session-id"]
            borrowed = await api.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={
                    **headers,
                    "Authorization": f"Bearer {other_key}",
                    "Mcp-Session-Id": session_id,
                    "Mcp-Protocol-Version": "2025-06-18",
                },
            )
            closed = await api.delete(
                "/mcp",
                headers={
                    **admin,
                    "Mcp-Session-Id": session_id,
                    "Mcp-Protocol-Version": "2025-06-18",
                },
            )
            return borrowed.status_code, closed.status_code

    borrowed, closed = asyncio.run(scenario())
    assert borrowed == 404 and closed == 200


def test_sanbox_mcp_over_stdio(live_server: LiveServer, short_tmp: Path) -> None:
    async def scenario() -> None:
        async with over_stdio(live_server, short_tmp / "config.toml") as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            assert tools == TOOLS
            await computer_work(session, "mcp-stdio", short_tmp)
            deleted = await call(session, "delete_computer", computer="mcp-stdio")
            assert not deleted.is_error, text(deleted)

    asyncio.run(scenario())
    assert live_server.data_dir.computer_ids() == []


def test_a_key_holds_a_bounded_number_of_mcp_sessions(live_server: LiveServer) -> None:
    """Past `SANBOX_MCP_SESSIONS_PER_KEY` (16) open sessions a key gets the API's 429 before a
    session is made; another key is not affected, and ending a session makes room."""
    version = {"Mcp-Protocol-Version": "2025-06-18"}
    initialize = INITIALIZE

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=live_server.url, timeout=30) as api:
            admin = {"Authorization": f"Bearer {live_server.key}"}
            made = await api.post("/v1/keys", json={"name": "other"}, headers=admin)
            other = {"Authorization": f"Bearer {made.json()['key']}"}
            accept = ACCEPT
            sessions = []
            for _ in range(16):
                opened = await api.post("/mcp", json=initialize, headers={**accept, **admin})
                assert opened.status_code == 200, opened.text
                sessions.append(opened.headers["mcp-session-id"])
            refused = await api.post("/mcp", json=initialize, headers={**accept, **admin})
            assert refused.status_code == 429 and "mcp-session-id" not in refused.headers
            assert refused.json()["error"]["code"] == "too_many_sessions"
            assert refused.headers["retry-after"]
            theirs = await api.post("/mcp", json=initialize, headers={**accept, **other})
            assert theirs.status_code == 200  # another key has its own room
            closed = await api.delete(
                "/mcp", headers={**admin, **version, "Mcp-Session-Id": sessions[0]}
            )
            assert closed.status_code == 200
            again = await api.post("/mcp", json=initialize, headers={**accept, **admin})
            assert again.status_code == 200, again.text

    asyncio.run(scenario())
