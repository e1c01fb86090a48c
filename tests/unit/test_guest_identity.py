"""A copy's new identity in the guest (the component tier's stand-in: an agent given a root of
its own, so only files change): the machine-id replaced and the SSH host keys deleted, their
folders synced before the call returns; a bad request changes nothing; a sync that fails is
the call's error."""

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


def params(**changed: Any) -> dict[str, Any]:
    entropy = base64.b64encode(bytes(range(32))).decode()
    given = {"hostname": "copy", "machine_id": MACHINE_ID, "entropy": entropy, "time": 1.0}
    return {**given, **changed}


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv(ssh.ROOT_ENV, str(tmp_path))
    (tmp_path / "etc" / "ssh").mkdir(parents=True)
    (tmp_path / "etc" / "machine-id").write_text("f" * 32 + "\n")
    for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"):
        (tmp_path / "etc" / "ssh" / name).write_text("the source's key\n")
    return tmp_path


def test_the_identity_is_synced_before_the_call_returns(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[tuple[list[str], str, list[str]]] = []
    real = identity._sync_folders

    def sync(folders: list[str]) -> None:  # what is on the disk when the sync runs
        on_disk = (root / "etc" / "machine-id").read_text()
        synced.append((folders, on_disk, os.listdir(root / "etc" / "ssh")))
        real(folders)

    monkeypatch.setattr(identity, "_sync_folders", sync)
    asyncio.run(identity.new_identity(params(), None, None))
    assert synced == [([str(root / "etc"), str(root / "etc" / "ssh")], MACHINE_ID + "\n", [])]


def test_a_bad_request_changes_nothing(root: Path) -> None:
    with pytest.raises(AgentRequestError):
        asyncio.run(identity.new_identity(params(machine_id="../x"), None, None))
    assert (root / "etc" / "machine-id").read_text() == "f" * 32 + "\n"
    assert len(os.listdir(root / "etc" / "ssh")) == 2


def test_a_sync_that_fails_is_the_calls_error(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host hears the identity was given only once it is on the disk: a failed sync is an
    error (the host then destroys the copy), never an answer."""

    def fail(_: list[str]) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(identity, "_sync_folders", fail)
    with pytest.raises(AgentRequestError, match="sync the new identity"):
        asyncio.run(identity.new_identity(params(), None, None))
