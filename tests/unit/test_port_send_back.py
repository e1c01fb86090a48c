"""The page that moves a browser to a port's URL without `?token=` goes to a path of the port's own
origin, whatever the request's path: one beginning `//host` would be another site's URL (an open
redirect on every port's host)."""

from __future__ import annotations

import asyncio
import re

import pytest
from starlette.types import Message

from sanbox.api.ports.send_back import same_origin_path, send_back

pytestmark = pytest.mark.unit


def refresh_target(raw_path: bytes, query: bytes = b"token=sbk_x&a=1") -> str:
    """Where the page `send_back` answers for `raw_path` moves the browser."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "path": raw_path.decode(), "raw_path": raw_path, "query_string": query}
    asyncio.run(send_back(scope, send))
    body = sent[1]["body"].decode()
    found = re.search(r'content="0;url=([^"]*)"', body)
    assert found is not None, body
    return found[1]


@pytest.mark.parametrize(
    "raw_path",
    [b"//evil.example/x", b"///evil.example/x", b"/\\evil.example/x", b"/\t/evil.example/x"],
)
def test_a_path_read_as_another_site_is_made_one_of_this_origin(raw_path: bytes) -> None:
    target = refresh_target(raw_path)
    assert target == "/evil.example/x?a=1"
    assert same_origin_path(raw_path) == b"/evil.example/x"


def test_an_ordinary_path_is_kept() -> None:
    assert refresh_target(b"/b/c%2Fd") == "/b/c%2Fd?a=1"
    assert refresh_target(b"/", b"token=sbk_x") == "/"
