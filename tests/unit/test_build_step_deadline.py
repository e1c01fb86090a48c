"""A build step ends on the host's clock: a guest whose agent trickles output and never sends
the exit (its agent replaced by a step) fails the step past its timeout, instead of holding the
build, and the server's one build at a time, for ever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sanbox.control import template_build
from sanbox.control.build_log import BuildLog
from sanbox.control.template_build import Builder, BuildFailed
from sanbox.host.agent.process import Stdout

pytestmark = pytest.mark.unit


class Trickle:
    async def events(self, timeout: float | None = None) -> AsyncIterator[Any]:
        while True:
            await asyncio.sleep(0.01)
            yield Stdout(b"still going\n")


class Client:
    async def exec_stream(self, *_args: Any, **_kw: Any) -> Trickle:
        return Trickle()


class Machine:
    async def client(self) -> Client:
        return Client()


def test_a_step_whose_exit_never_comes_fails_past_its_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(template_build, "STEP_TIMEOUT", 0.2)
    monkeypatch.setattr(template_build, "STEP_GRACE", 0.1)
    builder = object.__new__(Builder)
    builder.blog = BuildLog(tmp_path / "build.log")
    builder.blog.start()

    async def scenario() -> None:
        async with asyncio.timeout(10):
            with pytest.raises(BuildFailed, match="ran over"):
                await builder._sh(Machine(), ["sh", "-c", "x"], "step 1")  # type: ignore[arg-type]

    asyncio.run(scenario())
    assert "still going" in (tmp_path / "build.log").read_text()  # its output was kept
