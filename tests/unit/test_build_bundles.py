"""A package step's bundle goes into the build computer streamed from its files: the server
hands the agent each file's path, never its bytes (a bundle is up to 2 GiB)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from sanbox.control import build_bundles
from sanbox.host.door import AgentClient
from sanbox.templates.fetch_common import Bundle

pytestmark = pytest.mark.unit


class Files:
    def __init__(self) -> None:
        self.put: list[tuple[str, object, int]] = []

    async def put_(self, path: str, source: object, *, mode: int) -> int:
        self.put.append((path, source, mode))
        return 0


def test_each_file_is_put_from_its_path(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels/a.whl").write_bytes(b"a" * 100)
    (tmp_path / "install.sh").write_text("#!/bin/sh\n")
    bundle = Bundle(
        "pip", "k" * 64, tmp_path, "/var/tmp/x", ("sh",), ("install.sh", "wheels/a.whl"), 110
    )
    files = Files()
    client: Any = type("Client", (), {})()
    client.files = type("F", (), {"put": staticmethod(files.put_)})()
    asyncio.run(build_bundles.push(cast(AgentClient, client), bundle))
    assert files.put == [
        ("/var/tmp/x/install.sh", tmp_path / "install.sh", 0o755),
        ("/var/tmp/x/wheels/a.whl", tmp_path / "wheels/a.whl", 0o755),
    ]
