"""envd's `filesystem.Filesystem` service over the guest agent: Stat, ListDir, MakeDir, Move,
Remove, and watching a directory (CreateWatcher / GetWatcherEvents / RemoveWatcher, and the
WatchDir stream).

The agent has no rename and no inotify: Move is an `mv` run in the guest as the call's user, and
a watcher compares listings of the directory (names, types, sizes, times) at each poll, so it
reports creations, writes and removals (a rename is a removal and a creation), never events
that came and went between two polls."""

from __future__ import annotations

import asyncio
import secrets
import stat as statmod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..control.errors import ControlError, NotFoundError
from ..control.guest import FileInfo
from .connect import ConnectError
from .envd import Sandbox
from .errors import connect_error

MAX_ENTRIES = 10_000  # of one ListDir, however deep
MAX_DEPTH = 16
MAX_WATCHERS = 64  # per computer
WATCH_POLL = 0.25  # seconds between two listings of the WatchDir stream
KEEPALIVE = 30.0  # seconds of a quiet WatchDir stream before a keepalive
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


def _path(sb: Sandbox, msg: dict[str, Any], key: str = "path") -> str:
    value = msg.get(key)
    if not isinstance(value, str) or len(value) > 4096:
        raise ConnectError("invalid_argument", f"{key} is a path")
    return sb.path(value)


async def stat(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    return {"entry": entry(await sb.plane.stat_file(sb.org, sb.computer_id, _path(sb, msg)))}


async def list_dir(sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    path = _path(sb, msg)
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
    path = _path(sb, msg)
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
    source, destination = _path(sb, msg, "source"), _path(sb, msg, "destination")
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
    await sb.plane.remove_file(sb.org, sb.computer_id, _path(sb, msg), recursive=True)
    return {}


# watching ------------------------------------------------------------------------------------

Listing = dict[str, FileInfo]


@dataclass
class Watcher:
    path: str
    seen: Listing

    async def poll(self, sb: Sandbox) -> list[dict[str, Any]]:
        try:
            now = {i.name: i for i in await sb.plane.list_files(sb.org, sb.computer_id, self.path)}
        except ControlError as exc:
            raise connect_error(exc) from exc
        events = [
            _event(name, "EVENT_TYPE_CREATE", info)
            for name, info in now.items()
            if name not in self.seen
        ]
        events += [
            _event(name, "EVENT_TYPE_WRITE", info)
            for name, info in now.items()
            if name in self.seen and _changed(self.seen[name], info)
        ]
        events += [_event(name, "EVENT_TYPE_REMOVE", None) for name in self.seen if name not in now]
        self.seen = now
        return events


def _changed(before: FileInfo, after: FileInfo) -> bool:
    return (before.size, before.mtime, before.type) != (after.size, after.mtime, after.type)


def _event(name: str, kind: str, info: FileInfo | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": kind}
    if info is not None:
        out["entry"] = entry(info)
    return out


class Watchers:
    """Each computer's watchers, by id."""

    def __init__(self) -> None:
        self._by_computer: dict[str, dict[str, Watcher]] = {}

    async def _new(self, sb: Sandbox, msg: dict[str, Any]) -> Watcher:
        path = _path(sb, msg)
        info = await sb.plane.stat_file(sb.org, sb.computer_id, path)
        if info.type != "dir":
            raise ConnectError("invalid_argument", f"path {path} is not a directory")
        listing = await sb.plane.list_files(sb.org, sb.computer_id, path)
        return Watcher(path, {i.name: i for i in listing})

    async def create(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        mine = self._by_computer.setdefault(sb.computer_id, {})
        if len(mine) >= MAX_WATCHERS:
            raise ConnectError("resource_exhausted", f"at most {MAX_WATCHERS} watchers")
        watcher_id = secrets.token_hex(8)
        mine[watcher_id] = await self._new(sb, msg)
        return {"watcherId": watcher_id}

    def _find(self, sb: Sandbox, msg: dict[str, Any]) -> Watcher:
        found = self._by_computer.get(sb.computer_id, {}).get(str(msg.get("watcherId")))
        if found is None:
            raise ConnectError("not_found", "watcher not found")
        return found

    async def events(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        return {"events": await self._find(sb, msg).poll(sb)}

    async def remove(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        self._find(sb, msg)
        self._by_computer.get(sb.computer_id, {}).pop(str(msg.get("watcherId")), None)
        return {}

    async def stream(self, sb: Sandbox, msg: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        watcher = await self._new(sb, msg)
        yield {"start": {}}
        quiet = 0.0
        while True:
            await asyncio.sleep(WATCH_POLL)
            events = await watcher.poll(sb)
            for event in events:
                yield {"filesystem": event}
            quiet = 0.0 if events else quiet + WATCH_POLL
            if quiet >= KEEPALIVE:
                quiet = 0.0
                yield {"keepalive": {}}
