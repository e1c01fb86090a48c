"""What the guest agent says of a file (guest/files.py `file_info`): its whole mode (type bits
included) beside the permission bits an older host reads, and its owner's and group's names, left
out for an id the guest has no name for; and how envd's service says them
(e2b/envd_files.py `entry`), an agent before them answered as before. A symbolic link is described
as itself with its target resolved and what is there, as envd's (its Stat described the target)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sanbox.e2b.envd_files import entry, permissions
from sanbox.guest.files import Names, file_info
from sanbox.host.agent import FileInfo

pytestmark = pytest.mark.unit

NO_NAME = 54321  # an id no account or group has here


def stat_of(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, gid, 2, 0, 1.5, 0))


def test_the_guest_sends_the_whole_mode_and_the_names() -> None:
    info = file_info("/a/b", stat_of(stat.S_IFREG | 0o644))
    assert (info["mode"], info["st_mode"], info["type"]) == (0o644, stat.S_IFREG | 0o644, "file")
    assert (info["owner"], info["group"]) == ("root", "root")
    assert (info["uid"], info["gid"], info["name"]) == (0, 0, "b")


def test_an_id_without_a_name_is_sent_as_its_number_only() -> None:
    info = file_info("/a", stat_of(stat.S_IFDIR | 0o755, NO_NAME, NO_NAME))
    assert "owner" not in info and "group" not in info
    assert (info["uid"], info["gid"]) == (NO_NAME, NO_NAME)


def test_names_are_looked_up_once_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    names = Names()
    assert names.user(0) == "root"
    monkeypatch.setattr("pwd.getpwuid", lambda _uid: pytest.fail("looked up again"))
    assert names.user(0) == "root"


def test_an_id_past_the_range_has_no_name() -> None:
    assert (Names().user(2**40), Names().group(2**40)) == (None, None)


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        (stat.S_IFREG | 0o644, "-rw-r--r--"),
        (stat.S_IFDIR | 0o755, "drwxr-xr-x"),
        (stat.S_IFDIR | 0o1777, "dtrwxrwxrwx"),
        (stat.S_IFLNK | 0o777, "Lrwxrwxrwx"),
        (stat.S_IFCHR | 0o666, "Dcrw-rw-rw-"),
        (stat.S_IFBLK | 0o660, "Drw-rw----"),
        (stat.S_IFIFO | 0o600, "prw-------"),
        (stat.S_IFSOCK | 0o755, "Srwxr-xr-x"),
        (stat.S_IFREG | 0o4755, "urwxr-xr-x"),
        (stat.S_IFREG | 0o2755, "grwxr-xr-x"),
        (stat.S_IFREG | 0o6755, "ugrwxr-xr-x"),
        (stat.S_IFREG, "----------"),
    ],
)
def test_permissions_are_go_s_file_mode_string(mode: int, said: str) -> None:
    assert permissions(mode) == said


def info(**more: object) -> FileInfo:
    return FileInfo.from_body(
        {"name": "a", "path": "/a", "type": "file", "size": 1, "mode": 0o644, "mtime": 1.5}
        | {"uid": 1000, "gid": 1000}
        | more
    )


def test_envd_says_what_the_agent_sent() -> None:
    said = entry(info(st_mode=stat.S_IFREG | 0o644, owner="user", group="staff"))
    assert (said["permissions"], said["owner"], said["group"]) == ("-rw-r--r--", "user", "staff")
    assert said["mode"] == 0o644


def test_an_agent_before_the_names_is_answered_as_before() -> None:
    said = entry(info())
    assert (said["permissions"], said["owner"], said["group"]) == ("?rw-r--r--", "1000", "1000")
    assert entry(info(uid=0, gid=0))["owner"] == "root"


def test_the_guest_says_a_link_s_target_and_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "notes.txt").write_text("hi")
    os.chmod(tmp_path / "real" / "notes.txt", 0o640)
    (tmp_path / "hop").symlink_to("real")
    (tmp_path / "link").symlink_to("hop/notes.txt")
    (tmp_path / "dangling").symlink_to("nowhere")
    link = str(tmp_path / "link")
    info = file_info(link, os.lstat(link))
    assert info["type"] == "symlink" and info["size"] == len("hop/notes.txt")
    resolved = str((tmp_path / "real" / "notes.txt").resolve())
    assert (info["target"], info["target_type"], info["target_mode"]) == (resolved, "file", 0o640)
    dangling = str(tmp_path / "dangling")
    info = file_info(dangling, os.lstat(dangling))
    assert (info["target"], info["target_type"], info["target_mode"]) == (dangling, None, None)
    assert "target" not in file_info(resolved, os.lstat(resolved))


def test_envd_says_a_link_as_itself_with_what_it_points_to() -> None:
    link = {"type": "symlink", "size": 9, "mode": 0o777, "st_mode": stat.S_IFLNK | 0o777}
    said = entry(info(**link, target="/real/dir", target_type="dir", target_mode=0o755))
    assert (said["type"], said["mode"], said["isSymlink"]) == ("FILE_TYPE_DIRECTORY", 0o755, True)
    assert (said["symlinkTarget"], said["permissions"], said["size"]) == (
        "/real/dir",
        "Lrwxrwxrwx",
        "9",
    )
    nothing = entry(info(**link, target="/a"))  # a link to nothing: envd's unknown type
    assert (nothing["type"], nothing["mode"], nothing["symlinkTarget"]) == (
        "FILE_TYPE_UNSPECIFIED",
        0,
        "/a",
    )


def test_an_agent_before_link_targets_is_answered_as_before() -> None:
    said = entry(info(type="symlink", mode=0o777))
    assert (said["type"], said["mode"], said["isSymlink"]) == ("FILE_TYPE_FILE", 0o777, True)
    assert "symlinkTarget" not in said
