"""`create_snapshot()` through E2B's SDK: a name moves to the newest snapshot given it (as E2B
assigns a new build to the name) and `Sandbox.create(name)` makes a sandbox of that one;
`mode="filesystem"` keeps the disk only; a name Sanbox cannot take is refused before anything
is taken. (The stand-in guest cannot be stopped for a copy of its memory: the source here is
paused without memory, whose disk is what a snapshot keeps.)"""

from __future__ import annotations

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import SandboxException

from sanbox.e2b.identity import computer_id

from .conftest import E2bServer

pytestmark = pytest.mark.e2b


def _snapshots(e2b_server: E2bServer) -> dict[str, str | None]:
    r = httpx.get(
        f"{e2b_server.url}/v1/snapshots", headers={"Authorization": f"Bearer {e2b_server.key}"}
    )
    r.raise_for_status()
    return {s["id"]: s["name"] for s in r.json()["snapshots"]}


def test_a_named_snapshot_makes_sandboxes_by_its_name(e2b_server: E2bServer) -> None:
    source = Sandbox.create("base", envs=e2b_server.envs)
    made: list[Sandbox] = []
    try:
        assert source.pause(mode="filesystem")
        first = source.create_snapshot("nightly", mode="filesystem")
        assert first.snapshot_id.startswith("snp_") and first.names == ["nightly"]
        newer = source.create_snapshot("nightly", mode="filesystem")
        assert newer.names == ["nightly"] and newer.snapshot_id != first.snapshot_id
        kept = _snapshots(e2b_server)
        assert kept[first.snapshot_id] is None and kept[newer.snapshot_id] == "nightly"
        before = len(kept)
        with pytest.raises(SandboxException):
            source.create_snapshot("Not A Name!", mode="filesystem")
        assert len(_snapshots(e2b_server)) == before, "a refused name left a snapshot"
        made.append(Sandbox.create("nightly", envs=e2b_server.envs))
        events = httpx.get(
            f"{e2b_server.url}/v1/computers/{computer_id(made[0].sandbox_id)}/events",
            headers={"Authorization": f"Bearer {e2b_server.key}"},
        )
        assert made[0].commands.run("echo from it").stdout == "from it\n"
        assert newer.snapshot_id in events.text, events.text
        made.append(Sandbox.create(first.snapshot_id, envs=e2b_server.envs))  # by id too
        asked = {"X-API-KEY": e2b_server.key, "Idempotency-Key": "by-name-1"}
        twice = [
            httpx.post(
                f"{e2b_server.url}/e2b/sandboxes", json={"templateID": "nightly"}, headers=asked
            )
            for _ in range(2)
        ]
        assert [r.status_code for r in twice] == [201, 201], [r.text for r in twice]
        assert twice[0].json()["sandboxID"] == twice[1].json()["sandboxID"]  # a retry: the same
        Sandbox.kill(twice[0].json()["sandboxID"])
    finally:
        for sbx in made:
            sbx.kill()
        Sandbox.kill(source.sandbox_id)
        for snapshot_id in _snapshots(e2b_server):
            httpx.delete(
                f"{e2b_server.url}/v1/snapshots/{snapshot_id}",
                headers={"Authorization": f"Bearer {e2b_server.key}"},
            )
