"""envd's `filesystem.Filesystem` service over the guest agent: Stat, ListDir, MakeDir, Move,
Remove (watching a directory: `envd_watch`).

The agent makes folders as root: those a call makes (MakeDir's, and those above a file written or
a rename's destination, as envd's `EnsureDirs`) are then handed to the call's user. The agent has
no rename: Move is a `mkdir -p` of the destination's folder and an `mv`, run in the guest as the
call's user (so the folders it makes are the user's)."""

from __future__ import annotations

import posixpath
import stat as statmod
from datetime import UTC, datetime
from typing import Any

from ..control.errors import NotFoundError
from ..control.guest import FileInfo
from .connect import ConnectError
from .envd import Sandbox

MAX_ENTRIES = 10_000  # of one ListDir, however deep
MAX_DEPTH = 16
_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_FILE"}
_NO_TYPE = "FILE_TYPE_UNSPECIFIED"  # a link to nothing, or to what is neither file nor folder
_NAMES = {0: "root"}  # an agent that sends no names: root's is known, others' are numbers
# Go's `os.FileMode` letters of a file's type (a character device is "Dc": "c" after "ug")
_KINDS = {
    statmod.S_IFDIR: "d",
    statmod.S_IFLNK: "L",
    statmod.S_IFBLK: "D",
    statmod.S_IFCHR: "D",
    statmod.S_IFIFO: "p",
    statmod.S_IFSOCK: "S",
}


def permissions(st_mode: int) -> str:
    """envd's `permissions`: Go's `FileMode.String()` of the file's mode (`-rw-r--r--`,
    `drwxr-xr-x`, `Lrwxrwxrwx`, `dtrwxrwxrwx` for /tmp, `Dcrw-rw-rw-` for /dev/null)."""
    kind = _KINDS.get(statmod.S_IFMT(st_mode), "")
    kind += "u" if st_mode & statmod.S_ISUID else ""
    kind += "g" if st_mode & statmod.S_ISGID else ""
    kind += "c" if statmod.S_ISCHR(st_mode) else ""
    kind += "t" if st_mode & statmod.S_ISVTX else ""
    rwx = "".join(c if st_mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return (kind or "-") + rwx


def entry(info: FileInfo) -> dict[str, Any]:
    """An EntryInfo: 64-bit size as a string, enum names, an RFC 3339 time. The permissions and
    names as envd says them when the agent sends the file's whole mode and its owner's names;
    an agent before them: the mode without its type (`?rw-r--r--`) and numbers but root's. A
    symbolic link is itself (`isSymlink`, its size, `Lrwxrwxrwx`, its owner and time) with
    the type and permission bits of what it points to and `symlinkTarget`, the path with every
    link resolved, as envd's; an agent before targets: a file type, no target."""
    mtime = datetime.fromtimestamp(info.mtime, UTC).isoformat().replace("+00:00", "Z")
    out: dict[str, Any] = {
        "name": info.name,
        "type": _TYPES.get(info.type, "FILE_TYPE_FILE"),
        "path": info.path,
        "size": str(info.size),
        "mode": statmod.S_IMODE(info.mode),
        "permissions": (
            permissions(info.st_mode) if info.st_mode is not None else statmod.filemode(info.mode)
        ),
        "owner": info.owner or _NAMES.get(info.uid, str(info.uid)),
        "group": info.group or _NAMES.get(info.gid, str(info.gid)),
        "modifiedTime": mtime,
    }
    if info.type == "symlink":
        out["isSymlink"] = True
    if info.type == "symlink" and info.target is not None:  # as envd: what the link points to
        out["type"] = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY"}.get(
            info.target_type or "", _NO_TYPE
        )
        out["mode"] = info.target_mode or 0
        out["symlinkTarget"] = info.target
    return out


def path_of(sb: Sandbox, msg: dict[str, Any], key: str = "path") -> str:
    value = msg.get(key)
    if not isinstance(value, str) or len(value) > 4096:
        raise ConnectError("invalid_argument", f"{key} is a path")
    return sb.path(value)


async def stat(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    """envd's Stat: a symbolic link itself (its target in `symlinkTarget`), as envd's `Lstat`."""
    path = path_of(sb, msg)
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, path, follow=False))}


async def list_dir(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    path = path_of(sb, msg)
    depth = msg.get("depth") or 1
    if not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ConnectError("invalid_argument", f"depth is 1 to {MAX_DEPTH}")
    info = await sb.plane.stat_file(sb.org, sb.computer_id, path)
    if info.type != "dir":
        raise ConnectError("invalid_argument", f"path {path} is not a directory")
    out: list[dict[str, Any]] = []
    level = [path]
    for _ in range(depth):
        below: list[str] = []
        for folder in level:
            for child in await sb.plane.list_files(sb.org, sb.computer_id, folder):
                if len(out) >= MAX_ENTRIES:
                    raise ConnectError("resource_exhausted", f"more than {MAX_ENTRIES} entries")
                out.append(entry(child))
                if child.type == "dir":
                    below.append(child.path)
        level = below
    return {"entries": out}


async def make_dir(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    path = path_of(sb, msg)
    try:
        await sb.plane.stat_file(sb.org, sb.computer_id, path)
    except NotFoundError as exc:
        if exc.code != "not_found":
            raise
    else:
        raise ConnectError("already_exists", f"directory {path} already exists")
    await own(sb, *await ensure_dirs(sb, path))
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, path))}


async def ensure_dirs(sb: Sandbox, folder: str) -> list[str]:
    """`folder` and the folders above it made where missing (envd's `EnsureDirs`); the ones made,
    outermost first, for `own`. A folder that is there costs one stat."""
    missing: list[str] = []
    at = folder
    while at != "/":
        try:
            info = await sb.plane.stat_file(sb.org, sb.computer_id, at)
        except NotFoundError as exc:
            if exc.code != "not_found":
                raise
            missing.append(at)
            at = posixpath.dirname(at)
            continue
        if info.type != "dir":
            raise ConnectError("invalid_argument", f"path is a file: {at}")
        break
    if missing:
        await sb.plane.make_dir(sb.org, sb.computer_id, folder)
    return missing[::-1]


async def own(sb: Sandbox, *paths: str) -> None:
    """Files and folders the agent made (as root) handed to the call's user, in one exec. One
    that could not be handed over is an error: the call never ends as if its user owned what
    root does."""
    if sb.user != "root" and paths:
        result = await sb.plane.exec(
            sb.org,
            sb.computer_id,
            ["chown", "-h", f"{sb.user}:", "--", *paths],  # a link swapped in: itself
            user=0,
            timeout=30,
            max_output=4096,
        )
        if result.exit_code != 0:
            why = result.stderr.decode(errors="replace").strip()[:300] or f"exit {result.exit_code}"
            raise ConnectError(
                "internal",
                f"{paths[-1]} was made but is root's, not {sb.user!r}'s (chown: {why}): check "
                f"that the user exists in the sandbox, or write as root",
            )


async def move(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    source, destination = path_of(sb, msg, "source"), path_of(sb, msg, "destination")
    await sb.plane.stat_file(sb.org, sb.computer_id, source)  # not_found if it is not there
    result = await sb.plane.exec(
        sb.org,
        sb.computer_id,
        ["sh", "-c", 'mkdir -p -- "$2" && exec mv -T -- "$1" "$3"', "move", source]
        + [posixpath.dirname(destination), destination],
        user=sb.user,
        timeout=60,
        max_output=4096,
    )
    if result.exit_code != 0:
        why = result.stderr.decode(errors="replace").strip()[:300]
        raise ConnectError("invalid_argument", why or f"could not move {source}")
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, destination))}


async def remove(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    """As envd's `os.RemoveAll`: what is not there is removed already."""
    try:
        await sb.plane.remove_file(sb.org, sb.computer_id, path_of(sb, msg), recursive=True)
    except NotFoundError as exc:
        if exc.code != "not_found":
            raise
    return {}
