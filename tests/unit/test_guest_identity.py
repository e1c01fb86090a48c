"""A copy's new identity in the guest (the component tier's stand-in: an agent given a root of
its own, so only files change): the machine-id replaced and the SSH host keys deleted in the
call, their folders synced in a thread once the call has answered, even when deleting failed."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest

from sanbox.guest import identity, ssh
from sanbox.guest.errors import AgentRequestError

pytestmark = pytest.mark.unit
MACHINE_ID = "0123456789abcdef0123456789abcdef"


def params() -> dict[str, Any]:
    entropy = base64.b64encode(bytes(range(32))).decode()
    return {"hostname": "copy", "machine_id": MACHINE_ID, "entropy": entropy, "time": 1.0}


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv(ssh.ROOT_ENV, str(tmp_path))
    monkeypatch.setattr(identity, "SETTLE_DELAY", 0.0)
    (tmp_path / "etc" / "ssh").mkdir(parents=True)
    (tmp_path / "etc" / "machine-id").write_text("f" * 32 + "\n")
    for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"):
        (tmp_path / "etc" / "ssh" / name).write_text("the source's key\n")
    return tmp_path


class Syncs:
    """Records `_sync_folders`'s calls: which folders, and on which thread."""

    def __init__(self) -> None:
        self.folders: list[list[str]] = []
        self.done = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def __call__(self, folders: list[str]) -> None:
        for folder in folders:
            assert os.path.isdir(folder)
        self.folders.append(folders)
        self.loop.call_soon_threadsafe(self.done.set)


def test_the_answer_comes_before_the_sync(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> None:
        syncs = Syncs()
        monkeypatch.setattr(identity, "_sync_folders", syncs)
        await identity.new_identity(params(), None, None)
        assert (root / "etc" / "machine-id").read_text() == MACHINE_ID + "\n"
        assert os.listdir(root / "etc" / "ssh") == []  # the source's keys are gone at once
        assert syncs.folders == []  # not synced yet: the caller answers first
        await asyncio.wait_for(syncs.done.wait(), 10)
        assert syncs.folders == [[str(root / "etc"), str(root / "etc" / "ssh")]]

    asyncio.run(run())


def test_a_failed_deletion_still_syncs_the_new_machine_id(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(_: ssh.SshPaths) -> None:
        raise PermissionError("read-only")

    async def run() -> None:
        syncs = Syncs()
        monkeypatch.setattr(identity, "_sync_folders", syncs)
        monkeypatch.setattr(ssh, "_delete_host_keys", refuse)
        with pytest.raises(PermissionError):
            await identity.new_identity(params(), None, None)
        await asyncio.wait_for(syncs.done.wait(), 10)
        assert syncs.folders == [[str(root / "etc"), str(root / "etc" / "ssh")]]

    asyncio.run(run())


def test_the_real_sync_runs_and_a_bad_request_changes_nothing(root: Path) -> None:
    async def run() -> None:
        with pytest.raises(AgentRequestError):
            await identity.new_identity({**params(), "machine_id": "../x"}, None, None)
        assert (root / "etc" / "machine-id").read_text() == "f" * 32 + "\n"
        await identity.new_identity(params(), None, None)
        while not identity._settling:  # started by the loop's timer (the delay made 0 here)
            await asyncio.sleep(0)
        await asyncio.wait(set(identity._settling))  # the real fsyncs, in the default executor
        assert not identity._settling

    asyncio.run(run())
    assert (root / "etc" / "machine-id").read_text() == MACHINE_ID + "\n"
