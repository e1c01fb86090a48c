"""envd's `filesystem.Filesystem` service over the guest agent: Stat, ListDir, MakeDir, Move,
Remove (watching a directory: `envd_watch`).

The agent has no rename: Move is an `mv` run in the guest as the call's user."""

from __future__ import annotations

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
_NAMES = {0: "root"}


def entry(info: FileInfo) -> dict[str, Any]:
    """An EntryInfo: 64-bit size as a string, enum names, an RFC 3339 time."""
    mtime = datetime.fromtimestamp(info.mtime, UTC).isoformat().replace("+00:00", "Z")
    out: dict[str, Any] = {
        "name": info.name,
        "type": _TYPES.get(info.type, "FILE_TYPE_FILE"),
        "path": info.path,
        "size": str(info.size),
        "mode": statmod.S_IMODE(info.mode),
        "permissions": statmod.filemode(info.mode),
        "owner": _NAMES.get(info.uid, str(info.uid)),
        "group": _NAMES.get(info.gid, str(info.gid)),
        "modifiedTime": mtime,
    }
    if info.type == "symlink":
        out["isSymlink"] = True
    return out


def path_of(sb: Sandbox, msg: dict[str, Any], key: str = "path") -> str:
    value = msg.get(key)
    if not isinstance(value, str) or len(value) > 4096:
        raise ConnectError("invalid_argument", f"{key} is a path")
    return sb.path(value)


async def stat(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, path_of(sb, msg)))}


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
    except NotFoundError:
        pass
    else:
        raise ConnectError("already_exists", f"directory {path} already exists")
    await sb.plane.make_dir(sb.org, sb.computer_id, path)
    await own(sb, path)
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, path))}


async def own(sb: Sandbox, path: str) -> None:
    """A file or directory the agent made (as root) handed to the call's user."""
    if sb.user != "root":
        await sb.plane.exec(
            sb.org,
            sb.computer_id,
            ["chown", f"{sb.user}:", "--", path],
            user=0,
            timeout=30,
            max_output=4096,
        )


async def move(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    source, destination = path_of(sb, msg, "source"), path_of(sb, msg, "destination")
    await sb.plane.stat_file(sb.org, sb.computer_id, source)  # not_found if it is not there
    result = await sb.plane.exec(
        sb.org,
        sb.computer_id,
        ["mv", "-T", "--", source, destination],
        user=sb.user,
        timeout=60,
        max_output=4096,
    )
    if result.exit_code != 0:
        why = result.stderr.decode(errors="replace").strip()[:300]
        raise ConnectError("invalid_argument", why or f"could not move {source}")
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, destination))}


async def remove(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    await sb.plane.remove_file(sb.org, sb.computer_id, path_of(sb, msg), recursive=True)
    return {}
