"""What the MCP tools answer: output kept to its cap (and said so), files as text or base64, and
the API's errors as tool errors with their codes (not a crash, not a protocol error)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp.types import CallToolResult, TextContent

from sanbox.mcp.results import (
    capped,
    decoded,
    entries_result,
    error_result,
    exec_result,
    file_result,
)
from sanbox.mcp.tools import build_server
from sanbox.sdk import AsyncSanbox, ExecResult, FileEntry
from sanbox.sdk.errors import error_from_response

pytestmark = pytest.mark.unit


def text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def test_capped_keeps_short_text_and_cuts_long_text_at_a_character_boundary() -> None:
    assert capped("hello", 5) == ("hello", False)
    assert capped("hello!", 5) == ("hello", True)
    cut, was_cut = capped("é" * 10, 5)  # 2 bytes each: the third would straddle the cap
    assert (cut, was_cut) == ("éé", True)
    assert len(cut.encode()) <= 5


def test_a_flood_of_output_is_cut_to_the_cap_and_the_result_says_so() -> None:
    flood = ExecResult(exit_code=0, stdout="x" * 100_000, stderr="warning\n")
    result = exec_result("work", flood, cap=1024)
    data = result.structured_content
    assert isinstance(data, dict)
    assert len(data["stdout"]) == 1024 and data["stdout_truncated"] is True
    assert data["stderr"] == "warning\n" and data["stderr_truncated"] is False
    assert "[stdout truncated: only its first 1024 bytes are shown]" in text(result)
    assert "stderr truncated" not in text(result)
    assert len(text(result)) < 1200


def test_output_the_server_already_cut_is_reported_as_cut() -> None:
    r = ExecResult(exit_code=0, stdout="", stderr="e" * 10, stderr_truncated=True)
    result = exec_result("work", r, cap=64)
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["stderr_truncated"] is True
    assert "stderr truncated" in text(result)


def test_exec_status_line() -> None:
    assert text(exec_result("w", ExecResult(0, "hi\n", ""))) == "exit code 0\n--- stdout ---\nhi"
    timed_out = ExecResult(exit_code=-1, stdout="", stderr="", timed_out=True)
    assert text(exec_result("w", timed_out)).startswith("timed out")
    killed = ExecResult(exit_code=-1, stdout="", stderr="", signal=9)
    assert text(exec_result("w", killed)) == "killed by signal 9"


def test_files_are_text_when_utf8_and_base64_otherwise() -> None:
    assert file_result("/a", "héllo".encode()).structured_content == {
        "path": "/a",
        "size": 6,
        "encoding": "utf-8",
        "content": "héllo",
    }
    binary = file_result("/b", b"\x00\xff")
    assert binary.structured_content == {
        "path": "/b",
        "size": 2,
        "encoding": "base64",
        "content": "AP8=",
    }
    assert decoded("AP8=", "base64") == b"\x00\xff"
    assert decoded("é", "utf-8") == "é".encode()
    with pytest.raises(ValueError):
        decoded("not base64!", "base64")


def test_a_huge_folder_is_listed_up_to_the_cap() -> None:
    entries = [FileEntry(name=f"f{i}", path=f"/d/f{i}", type="file") for i in range(30)]
    result = entries_result("/d", entries, cap=10)
    assert isinstance(result.structured_content, dict)
    assert len(result.structured_content["entries"]) == 10
    assert result.structured_content["truncated"] is True
    assert "20 more entries not shown" in text(result)


def test_an_api_error_is_a_tool_error_with_its_code() -> None:
    body = json.dumps({"error": {"code": "computer_not_found", "message": "no computer 'x'"}})
    result = error_result(error_from_response(404, body.encode()))
    assert result.is_error
    assert text(result) == "error (computer_not_found): no computer 'x'"
    assert result.structured_content == {
        "error": {"code": "computer_not_found", "message": "no computer 'x'"}
    }


def call_tool(transport: httpx.AsyncBaseTransport, tool: str, **arguments: Any) -> CallToolResult:
    """Call a tool of a server whose client talks to `transport` (the SDK's test seam)."""

    async def scenario() -> CallToolResult:
        async with AsyncSanbox("http://sanbox.test", "sbk_test", transport=transport) as sanbox:

            @asynccontextmanager
            async def clients(_ctx: Any) -> AsyncIterator[AsyncSanbox]:
                yield sanbox

            result = await build_server(clients).call_tool(tool, arguments)
        assert isinstance(result, CallToolResult)
        return result

    return asyncio.run(scenario())


def test_tools_answer_the_api_error_not_a_crash() -> None:
    def api(request: httpx.Request) -> httpx.Response:
        error = {"code": "computer_not_found", "message": "no computer named 'ghost'"}
        return httpx.Response(404, json={"error": error})

    result = call_tool(httpx.MockTransport(api), "exec", computer="ghost", cmd="true")
    assert result.is_error
    assert text(result) == "error (computer_not_found): no computer named 'ghost'"


def test_an_unreachable_server_is_a_tool_error() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    result = call_tool(httpx.MockTransport(refused), "list_computers")
    assert result.is_error and isinstance(result.structured_content, dict)
    assert result.structured_content["error"]["code"] == "connection_failed"


def test_bad_base64_is_refused_before_anything_is_sent() -> None:
    sent: list[httpx.Request] = []

    def api(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    result = call_tool(
        httpx.MockTransport(api),
        "write_file",
        computer="work",
        path="/f",
        content="%%%",
        encoding="base64",
    )
    assert result.is_error and "not valid base64" in text(result)
    assert sent == []


@pytest.mark.parametrize("args", [[], ["mcp", "--help"]])
def test_the_cli_loads_no_mcp_package_until_sanbox_mcp_runs(args: list[str]) -> None:
    probe = (
        "import json, sys\n"
        f"sys.argv = ['sanbox', *{args!r}]\n"
        "from sanbox.cli.main import app\n"
        "if sys.argv[1:]:\n"
        "    try:\n"
        "        app()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stdout.strip().splitlines()[-1])
    mcp = ("mcp", "mcp_types", "sanbox.mcp")
    assert [m for m in modules if any(m == p or m.startswith(p + ".") for p in mcp)] == []


def test_decoded_base64_round_trip() -> None:
    raw = bytes(range(256))
    assert decoded(base64.b64encode(raw).decode(), "base64") == raw


@pytest.mark.parametrize(("computer", "name"), [("work", ".."), ("..", "openai"), ("work", ".")])
def test_a_dot_name_never_reaches_another_resource(computer: str, name: str) -> None:
    """A client folds `.` and `..` into the path (`/v1/computers/work/secrets/..` would be sent
    as `DELETE /v1/computers/work`): refused before anything is sent."""
    sent: list[tuple[str, str]] = []

    def api(request: httpx.Request) -> httpx.Response:
        sent.append((request.method, request.url.path))
        return httpx.Response(204)

    result = call_tool(httpx.MockTransport(api), "unbind_secret", computer=computer, name=name)
    assert result.is_error and sent == []
    assert "invalid_name" in text(result)
