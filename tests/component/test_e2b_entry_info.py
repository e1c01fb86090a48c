"""`files.get_info` and `files.list` say a file's permissions, owner and group as envd does: Go's
`FileMode.String()` (`-rw-r--r--`, `drwxr-xr-x`, `dtrwxrwxrwx`), not Python's `?rw-r--r--` of a
mode without its type; the owner's and group's names as the guest knows them, for anyone (not
only root), their numbers for an id the guest has no name for. `files.get_info` of a symbolic link
describes the link, as envd's Stat does (`isSymlink`, `symlinkTarget` resolved, the type and
permission bits of what it points to, the link's permissions `Lrwxrwxrwx`), where it described
its target as if it were the file; a listing says the target too."""

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


def test_a_symbolic_link_is_described_as_itself(e2b: E2bStand) -> None:
    _, envd = e2b.create()
    folder = e2b.scratch / "links"
    folder.mkdir()
    (folder / "real").mkdir()
    (folder / "real" / "notes.txt").write_text("hello")
    os.chmod(folder / "real" / "notes.txt", 0o640)
    (folder / "to-file").symlink_to("real/notes.txt")
    (folder / "to-dir").symlink_to("real")
    (folder / "dangling").symlink_to("nowhere")
    real = folder.resolve() / "real"

    to_file = call(e2b, envd, "Stat", {"path": str(folder / "to-file")})["entry"]
    assert to_file["isSymlink"] is True, to_file
    assert to_file["symlinkTarget"] == str(real / "notes.txt")
    assert (to_file["type"], to_file["mode"]) == ("FILE_TYPE_FILE", 0o640)
    assert to_file["permissions"] == "Lrwxrwxrwx"
    assert to_file["size"] == str(len("real/notes.txt"))  # the link's, not the file's 5
    assert to_file["path"] == str(folder / "to-file")

    to_dir = call(e2b, envd, "Stat", {"path": str(folder / "to-dir")})["entry"]
    assert (to_dir["type"], to_dir["symlinkTarget"]) == ("FILE_TYPE_DIRECTORY", str(real))
    dangling = call(e2b, envd, "Stat", {"path": str(folder / "dangling")})["entry"]
    assert dangling["isSymlink"] is True and dangling["symlinkTarget"] == str(folder / "dangling")

    listed = {e["name"]: e for e in call(e2b, envd, "ListDir", {"path": str(folder)})["entries"]}
    assert listed["to-dir"]["type"] == "FILE_TYPE_DIRECTORY"
    assert listed["to-file"]["symlinkTarget"] == str(real / "notes.txt")
    assert "symlinkTarget" not in listed["real"]
