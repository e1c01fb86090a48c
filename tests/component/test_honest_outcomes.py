"""A verb that did not do what was asked never answers success: it answers a stable code and a
message saying what happened and what state the computer is in now, even when the computer was
left safely as it was; the CLI says so in one line and exits non-zero. The faults are real: the
local 'VM' has no hypervisor monitor (so a pause or a snapshot of it running cannot save it),
and a mount inside a computer's folder keeps its files from being removed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sanbox.cli.main import app

from .conftest import LiveServer, Server
from .test_api_computers import create, error

pytestmark = pytest.mark.component


def test_a_pause_that_cannot_save_answers_pause_failed_and_still_runs(server: Server) -> None:
    h = server.headers()
    create(server, name="busy")
    r = server.client.post("/v1/computers/busy/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    message = r.json()["error"]["message"]
    assert message.startswith("pause failed: ") and "still running" in message
    assert server.client.get("/v1/computers/busy", headers=h).json()["state"] == "running"
    ran = server.client.post("/v1/computers/busy/exec", json={"cmd": ["echo", "on"]}, headers=h)
    assert ran.status_code == 200 and ran.json()["stdout"] == "on\n"
    events = server.client.get("/v1/computers/busy/events", headers=h).json()["events"]
    assert events[-1]["type"] == "computer.pause_failed"


def test_a_snapshot_that_failed_says_so_and_what_the_computer_is_now(server: Server) -> None:
    h = server.headers()
    create(server, name="snapped")
    r = server.client.post("/v1/computers/snapped/snapshots", json={"memory": True}, headers=h)
    assert r.status_code >= 500, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("snapshot failed: ")
    assert message.endswith("no snapshot was kept; the computer is still running as it was")
    assert server.client.get("/v1/snapshots", headers=h).json()["snapshots"] == []
    assert server.client.get("/v1/computers/snapped", headers=h).json()["state"] == "running"
    # a snapshot that can be taken still is (a stopped computer's disk)
    assert server.client.post("/v1/computers/snapped/stop", headers=h).status_code == 200
    r = server.client.post("/v1/computers/snapped/snapshots", json={}, headers=h)
    assert r.status_code == 201, r.text


@pytest.fixture
def pinned(server: Server) -> Iterator[Path]:
    """A computer whose folder holds a mount point: its files cannot all be removed."""
    made = create(server, name="pinned")
    point = server.data_dir.computer(str(made["id"])).root / "pinned"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "sanbox-pin", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_delete_that_leaves_files_answers_delete_failed(server: Server, pinned: Path) -> None:
    h = server.headers()
    r = server.client.delete("/v1/computers/pinned", headers=h)
    assert error(r) == (500, "delete_failed"), r.text
    assert "delete it again" in r.json()["error"]["message"]
    got = server.client.get("/v1/computers/pinned", headers=h).json()
    assert got["state"] == "error" and got["last_error"].startswith("delete failed: ")
    subprocess.run(["umount", str(pinned)], check=True)
    r = server.client.delete("/v1/computers/pinned", headers=h)
    assert r.status_code == 200, r.text
    assert server.client.get("/v1/computers/pinned", headers=h).status_code == 404
    assert not pinned.parent.exists()


def test_the_cli_says_a_pause_failed_in_one_line_and_exits_non_zero(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    assert runner.invoke(app, ["create", "--name", "cli-pause"]).exit_code == 0
    r = runner.invoke(app, ["pause", "cli-pause"])
    assert r.exit_code == 1, r.output
    said = [line for line in r.output.splitlines() if line.strip()]
    assert len(said) == 1 and "pause_failed" in said[0] and "still running" in said[0], said
    assert "Traceback" not in r.output
    assert runner.invoke(app, ["rm", "cli-pause"]).exit_code == 0
