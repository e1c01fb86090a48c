"""`exec` answers when its command ends: with no timeout the SDK waits as long as the command
runs (it gave up after the client's 60 s before, the command running on, its output lost); with
one, that long and the client's own margin."""

from __future__ import annotations

import json

import httpx
import pytest

from sanbox.sdk.sync import Sanbox

pytestmark = pytest.mark.unit

COMPUTER = {"id": "cmp_a", "name": "a", "state": "running"}


def _client(seen: list[httpx.Request]) -> Sanbox:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/exec"):
            return httpx.Response(200, json={"exit_code": 0, "stdout": "", "stderr": ""})
        return httpx.Response(200, json=COMPUTER)

    return Sanbox("http://sanbox.test", "sbx_test", transport=httpx.MockTransport(answer))


def test_an_exec_without_a_timeout_waits_as_long_as_it_runs() -> None:
    seen: list[httpx.Request] = []
    with _client(seen) as client:
        c = client.computers.get("a")
        c.exec("sleep 3600")
        c.exec("true", timeout=5)
    waits = [r.extensions["timeout"] for r in seen if r.url.path.endswith("/exec")]
    assert waits[0]["read"] is None and waits[0]["connect"] == 60
    assert waits[1]["read"] == 65
    assert json.loads(seen[-1].content)["timeout"] == 5
