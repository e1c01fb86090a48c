"""A request's dependencies run in its own task: none is handed to the thread pool (a sync
dependency is, by FastAPI: a thread hop, and two wake-ups, on every /v1 call: an exec's
`computers` dependency cost ~0.25 ms of the server's ~2.7 ms of Python a call here)."""

from __future__ import annotations

from typing import Any

import fastapi.dependencies.utils as solving
import pytest

from .conftest import Server

pytestmark = pytest.mark.component


def test_no_dependency_of_a_v1_call_runs_in_a_thread(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[str] = []
    pooled = solving.run_in_threadpool  # type: ignore[attr-defined]

    async def noting(call: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(getattr(call, "__qualname__", repr(call)))
        return await pooled(call, *args, **kwargs)

    monkeypatch.setattr(solving, "run_in_threadpool", noting)
    h = server.headers()
    made = server.client.post("/v1/computers", json={"name": "hops"}, headers=h)
    assert made.status_code == 201, made.text
    ran = server.client.post("/v1/computers/hops/exec", json={"cmd": ["true"]}, headers=h)
    assert ran.status_code == 200, ran.text
    assert server.client.get("/v1/computers/hops", headers=h).status_code == 200
    assert server.client.get("/v1/keys", headers=h).status_code == 200
    assert handed == []
