"""The host's image builds through the API, the SDK and the CLI: which is current, which
computers use which, and a prune that removes only what nothing needs."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from sanbox import Sanbox
from sanbox.cli.main import app
from sanbox.host.data.layout import DataDir
from sanbox.host.image import Recipe, recipe_for

from .conftest import LiveServer, Server

pytestmark = pytest.mark.component


def add_build(dd: DataDir, build_id: str, age: float) -> None:
    """A copy of the fake current build under another id, `age` seconds old."""
    images = dd.images / "base"
    first = recipe_for("base").build_id()
    shutil.copytree(images / first, images / build_id)
    manifest = images / build_id / "manifest.json"
    manifest.write_text(manifest.read_text().replace(first, build_id))
    then = manifest.stat().st_mtime - age
    os.utime(manifest, (then, then))


def listed(server: Server, key: str | None = None) -> dict[str, dict[str, object]]:
    r = server.client.get("/v1/images", headers=server.headers(key))
    assert r.status_code == 200, r.text
    return {b["build_id"]: b for b in r.json()["images"]}


def test_builds_in_use_are_kept_and_the_rest_pruned(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = recipe_for("base").build_id()
    h = server.headers()
    assert server.client.post("/v1/computers", json={"name": "on-current"}, headers=h).is_success
    add_build(server.data_dir, "stale", age=3600)
    add_build(server.data_dir, "older", age=1800)
    with monkeypatch.context() as m:  # a computer made while "older" was the current build
        m.setattr(Recipe, "build_id", lambda self, archive=None: "older")
        r = server.client.post("/v1/computers", json={"name": "on-older"}, headers=h)
        assert r.json()["image"] == "older"

    builds = listed(server)
    assert set(builds) == {current, "stale", "older"}
    assert builds[current]["current"] and builds[current]["computers"] == 1
    assert builds["older"]["computers"] == 1 and builds["older"]["needed"]
    assert not builds["stale"]["current"] and not builds["stale"]["needed"]
    assert all(int(str(b["bytes"])) > 0 for b in builds.values())

    r = server.client.post("/v1/images/prune", headers=h)
    assert [b["build_id"] for b in r.json()["removed"]] == ["stale"]
    assert r.json()["freed_bytes"] == builds["stale"]["bytes"]
    assert set(listed(server)) == {current, "older"}
    assert not (server.data_dir.images / "base" / "stale").exists()
    assert list(server.data_dir.tmp.iterdir()) == []
    # the computer on the older build still starts: its build is still there
    assert server.client.post("/v1/computers/on-older/restart", headers=h).status_code == 200

    # once it is gone, so is the need for its build
    assert server.client.delete("/v1/computers/on-older", headers=h).is_success
    removed = server.client.post("/v1/images/prune", headers=h).json()["removed"]
    assert [b["build_id"] for b in removed] == ["older"]
    assert server.client.post("/v1/images/prune", headers=h).json() == {
        "removed": [],
        "freed_bytes": 0,
    }


def test_images_need_an_admin_key(server: Server) -> None:
    h = server.headers()
    r = server.client.post("/v1/orgs", json={"name": "tenant"}, headers=h)
    assert r.status_code == 201
    key = server.client.post("/v1/keys", json={"org": "tenant"}, headers=h).json()["key"]
    for method, path in (("GET", "/v1/images"), ("POST", "/v1/images/prune")):
        r = server.client.request(method, path, headers=server.headers(key))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text


def test_sdk_and_cli(live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    add_build(live_server.data_dir, "stale", age=60)
    with Sanbox(live_server.url, live_server.key) as client:
        assert sorted(b.build_id for b in client.images.list() if not b.needed) == ["stale"]
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    r = runner.invoke(app, ["image", "ls", "--json"])
    assert r.exit_code == 0, r.output
    assert {b["build_id"] for b in json.loads(r.output)} == {recipe_for("base").build_id(), "stale"}
    r = runner.invoke(app, ["image", "prune"])
    assert r.exit_code == 0 and "removed base build stale" in r.output and "1 build(s)" in r.output
    with Sanbox(live_server.url, live_server.key) as client:
        assert [b.build_id for b in client.images.list()] == [recipe_for("base").build_id()]
