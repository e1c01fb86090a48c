"""`files.get_info` and `files.list` say a file's permissions, owner and group as envd does: Go's
`FileMode.String()` (`-rw-r--r--`, `drwxr-xr-x`, `dtrwxrwxrwx`), not Python's `?rw-r--r--` of a
mode without its type; the owner's and group's names as the guest knows them, for anyone (not
only root), their numbers for an id the guest has no name for."""

from __future__ import annotations

import os
import pwd
from typing import Any

import pytest

from .conftest import E2bStand

pytestmark = pytest.mark.component

FILES = "/e2b-envd/filesystem.Filesystem"
NOBODY = 65534
NO_NAME = 54321  # an id no account or group has


def owned(path: str, uid: int) -> None:
    if os.geteuid() == 0:
        os.chown(path, uid, uid)


def call(e2b: E2bStand, envd: dict[str, str], method: str, body: dict[str, Any]) -> Any:
    r = e2b.client.post(
        f"{FILES}/{method}", json=body, headers={**envd, "Content-Type": "application/json"}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_permissions_and_names_are_envd_s(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    folder = e2b.scratch / "info"
    folder.mkdir()
    (folder / "notes.txt").write_text("hi")
    os.chmod(folder / "notes.txt", 0o644)
    owned(str(folder / "notes.txt"), NOBODY)
    (folder / "shared").mkdir()
    os.chmod(folder / "shared", 0o1777)
    (folder / "tool").write_text("#!/bin/sh\n")
    os.chmod(folder / "tool", 0o4755)
    (folder / "orphan").write_text("")
    owned(str(folder / "orphan"), NO_NAME)
    os.chmod(folder, 0o755)

    expected = pwd.getpwuid(NOBODY if os.geteuid() == 0 else os.geteuid()).pw_name
    info = call(e2b, envd, "Stat", {"path": str(folder / "notes.txt")})["entry"]
    assert (info["permissions"], info["mode"]) == ("-rw-r--r--", 0o644), info
    assert info["owner"] == expected, info
    assert call(e2b, envd, "Stat", {"path": str(folder)})["entry"]["permissions"] == "drwxr-xr-x"

    listed = {e["name"]: e for e in call(e2b, envd, "ListDir", {"path": str(folder)})["entries"]}
    assert listed["notes.txt"]["permissions"] == "-rw-r--r--"
    assert (listed["notes.txt"]["owner"], listed["notes.txt"]["group"]) == (
        info["owner"],
        info["group"],
    )
    assert listed["shared"]["permissions"] == "dtrwxrwxrwx"
    assert listed["tool"]["permissions"] == "urwxr-xr-x"
    if os.geteuid() == 0:
        assert (info["owner"], info["group"]) == ("nobody", "nogroup")
        assert (listed["orphan"]["owner"], listed["orphan"]["group"]) == (
            str(NO_NAME),
            str(NO_NAME),
        )
