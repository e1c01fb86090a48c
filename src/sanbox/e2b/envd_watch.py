"""envd's watching of a directory (CreateWatcher / GetWatcherEvents / RemoveWatcher, and the
WatchDir stream), with the guest agent's inotify watch (`DirWatch`, protocol 3), as E2B's envd
reports it: each creation, write, removal, attribute change, a rename as `rename` of the old name
and `create` of the new one, and (recursive) every folder below, new ones included, by their
path relative to the watched folder.

A watcher polled by the SDK (CreateWatcher) is read into a queue of at most `MAX_QUEUED` events
and `MAX_QUEUED_BYTES` bytes (a name is up to 4096 bytes: a count alone let one watcher hold
16 MiB, 64 of them a sandbox's gigabyte); past that, or when the guest's queue overflowed, events
are lost and a GetWatcherEvents says so
(`data_loss`) once the events queued were read. One that ended (its folder or its computer gone)
says why until it is removed, or is forgotten `ENDED_KEPT` seconds later. A WatchDir stream ends
with `data_loss` when the guest's queue overflowed.

An agent before protocol 3 has no inotify: its watchers compare listings of the folder at each
poll (`Poll`), so they report creations, writes and removals (a rename is a removal and a
creation), never what came and went between two polls, and the top folder only."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..control.errors import ControlError
from ..control.guest import FileInfo, FsEvent, GuestWatch
from ..tasks import cancel_and_wait
from .budgets import EVENT_COST, Reservations
from .connect import ConnectError
from .envd import Sandbox
from .envd_files import entry, path_of
from .errors import connect_error

MAX_WATCHERS = 64  # per computer
MAX_QUEUED = 4096  # events waiting for a GetWatcherEvents, per watcher
MAX_QUEUED_BYTES = 2**20  # bytes of them (each its name and `budgets.EVENT_COST`), per watcher
WATCH_POLL = 0.25  # seconds between two listings of a WatchDir stream without inotify
KEEPALIVE = 30.0  # seconds of a quiet WatchDir stream before a keepalive
ENDED_KEPT = 600.0  # seconds an ended watcher (its folder or computer gone) still says why
EVENT_TYPES = {
    "create": "EVENT_TYPE_CREATE",
    "write": "EVENT_TYPE_WRITE",
    "remove": "EVENT_TYPE_REMOVE",
    "rename": "EVENT_TYPE_RENAME",
    "chmod": "EVENT_TYPE_CHMOD",
}
LOST = "the guest's event queue overflowed: events were lost"


def fs_event(event: FsEvent) -> dict[str, Any]:
    return {"name": event.name, "type": EVENT_TYPES[event.type]}


# without inotify -----------------------------------------------------------------------------


@dataclass
class Poll:
    """A folder's listing, compared with the next one."""

    path: str
    seen: dict[str, FileInfo]

    @classmethod
    async def start(cls, sb: Sandbox, path: str) -> Poll:
        listing = await sb.plane.list_files(sb.org, sb.computer_id, path)
        return cls(path, {i.name: i for i in listing})

    async def poll(self, sb: Sandbox) -> list[dict[str, Any]]:
        try:
            now = {i.name: i for i in await sb.plane.list_files(sb.org, sb.computer_id, self.path)}
        except ControlError as exc:
            raise connect_error(exc) from exc
        events = [
            _polled(name, "EVENT_TYPE_CREATE", info)
            for name, info in now.items()
            if name not in self.seen
        ]
        events += [
            _polled(name, "EVENT_TYPE_WRITE", info)
            for name, info in now.items()
            if name in self.seen and _changed(self.seen[name], info)
        ]
        gone = [name for name in self.seen if name not in now]
        events += [_polled(name, "EVENT_TYPE_REMOVE", None) for name in gone]
        self.seen = now
        return events


def _changed(before: FileInfo, after: FileInfo) -> bool:
    return (before.size, before.mtime, before.type) != (after.size, after.mtime, after.type)


def _polled(name: str, kind: str, info: FileInfo | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": kind}
    if info is not None:
        out["entry"] = entry(info)
    return out


# a watcher the SDK polls ---------------------------------------------------------------------


@dataclass
class Queued:
    """An inotify watch read into a bounded queue by its own task."""

    events: collections.deque[dict[str, Any]] = field(default_factory=collections.deque)
    bytes: int = 0  # what the events queued are counted for (`MAX_QUEUED_BYTES`)
    lost: bool = False
    ended: ConnectError | None = None
    ended_at: float = 0.0  # the event loop's time
    task: asyncio.Task[None] | None = None

    def take(self) -> list[dict[str, Any]]:
        if not self.events and self.lost:
            self.lost = False
            raise ConnectError("data_loss", LOST)
        if not self.events and self.ended is not None:
            raise self.ended
        taken = list(self.events)
        self.events.clear()
        self.bytes = 0
        return taken

    async def read(self, watch: GuestWatch) -> None:
        try:
            while (batch := await watch.next()) is not None:
                for event in batch:
                    full = len(self.events) >= MAX_QUEUED or self.bytes >= MAX_QUEUED_BYTES
                    if event.type == "overflow" or full:
                        self.lost = True
                    else:
                        self.events.append(fs_event(event))
                        self.bytes += len(event.name) + EVENT_COST
            self.ended = ConnectError("not_found", "the watched directory is gone")
        except ControlError as exc:
            self.ended = connect_error(exc)
        self.ended_at = asyncio.get_running_loop().time()


Watcher = Poll | Queued


class Watchers:
    """Each computer's watchers, by id."""

    def __init__(self) -> None:
        self._by_computer: dict[str, dict[str, Watcher]] = {}
        self._stacks: dict[str, contextlib.AsyncExitStack] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._creating = Reservations()  # creates awaiting the guest, by computer

    async def _check(self, sb: Sandbox, msg: dict[str, Any]) -> str:
        path = path_of(sb, msg)
        info = await sb.plane.stat_file(sb.org, sb.computer_id, path)
        if info.type != "dir":
            raise ConnectError("invalid_argument", f"path {path} is not a directory")
        return path

    def _sweep(self) -> None:
        """Forget the watchers that ended long ago (their computer deleted, most likely), with
        what they held: only a watcher still watching, or ended lately, is kept."""
        before = asyncio.get_running_loop().time() - ENDED_KEPT
        for computer, mine in list(self._by_computer.items()):
            for watcher_id, watcher in list(mine.items()):
                if isinstance(watcher, Queued) and watcher.ended and watcher.ended_at < before:
                    del mine[watcher_id]
            if not mine:
                del self._by_computer[computer]

    async def create(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        self._sweep()
        mine = len(self._by_computer.get(sb.computer_id, {}))
        if mine + self._creating.count(sb.computer_id) >= MAX_WATCHERS:
            raise ConnectError("resource_exhausted", f"at most {MAX_WATCHERS} watchers")
        with self._creating.held(sb.computer_id):  # until it is registered, or failed
            return await self._create(sb, msg)

    async def _create(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        path = await self._check(sb, msg)
        watcher_id = secrets.token_hex(8)
        stack = contextlib.AsyncExitStack()
        watch = await stack.enter_async_context(
            sb.plane.watch_dir(sb.org, sb.computer_id, path, msg.get("recursive") is True)
        )
        if watch is None:
            await stack.aclose()
            polled = await Poll.start(sb, path)
            # (the computer's dict read again: a sweep meanwhile may have dropped an empty one)
            self._by_computer.setdefault(sb.computer_id, {})[watcher_id] = polled
            return {"watcherId": watcher_id}
        queued = Queued()
        queued.task = asyncio.get_running_loop().create_task(queued.read(watch))
        stack.push_async_callback(cancel_and_wait, queued.task)
        self._by_computer.setdefault(sb.computer_id, {})[watcher_id] = queued
        self._stacks[watcher_id] = stack
        queued.task.add_done_callback(lambda _task: self._release(watcher_id))
        return {"watcherId": watcher_id}

    def _release(self, watcher_id: str) -> None:
        """A watch that ended (its folder gone, the guest unreachable) holds nothing more: the
        computer is no longer busy with it. Its watcher stays, to say why, until removed."""
        stack = self._stacks.pop(watcher_id, None)
        if stack is not None:
            closing = asyncio.get_running_loop().create_task(stack.aclose())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    def _find(self, sb: Sandbox, msg: dict[str, Any]) -> tuple[str, Watcher]:
        watcher_id = str(msg.get("watcherId"))
        found = self._by_computer.get(sb.computer_id, {}).get(watcher_id)
        if found is None:
            raise ConnectError("not_found", "watcher not found")
        return watcher_id, found

    async def events(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        _id, watcher = self._find(sb, msg)
        if isinstance(watcher, Poll):
            return {"events": await watcher.poll(sb)}
        return {"events": watcher.take()}

    async def remove(self, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
        watcher_id, _watcher = self._find(sb, msg)
        self._by_computer.get(sb.computer_id, {}).pop(watcher_id, None)
        stack = self._stacks.pop(watcher_id, None)
        if stack is not None:
            await stack.aclose()
        return {}

    async def stream(self, sb: Sandbox, msg: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        path = await self._check(sb, msg)
        recursive = msg.get("recursive") is True
        async with sb.plane.watch_dir(sb.org, sb.computer_id, path, recursive) as watch:
            if watch is None:
                async for message in _polled_stream(sb, await Poll.start(sb, path)):
                    yield message
                return
            yield {"start": {}}
            while True:
                try:
                    batch = await asyncio.wait_for(watch.next(), KEEPALIVE)
                except TimeoutError:
                    yield {"keepalive": {}}
                    continue
                if batch is None:
                    return
                for event in batch:
                    if event.type == "overflow":
                        raise ConnectError("data_loss", LOST)
                    yield {"filesystem": fs_event(event)}


async def _polled_stream(sb: Sandbox, poll: Poll) -> AsyncIterator[dict[str, Any]]:
    yield {"start": {}}
    quiet = 0.0
    while True:
        await asyncio.sleep(WATCH_POLL)
        events = await poll.poll(sb)
        for event in events:
            yield {"filesystem": event}
        quiet = 0.0 if events else quiet + WATCH_POLL
        if quiet >= KEEPALIVE:
            quiet = 0.0
            yield {"keepalive": {}}
