"""``watch`` streams (protocol 3): a folder watched with inotify (``inotify.py``).

Params: ``path`` (absolute), ``recursive`` (bool: every folder below too, and each folder made or
moved in from then on). The agent answers MSG ``watching``, then sends what happens as DATA on
channel 1, one JSON object a line: ``{"name": <path relative to the folder>, "type": create |
write | remove | rename | chmod}``, or ``{"type": "overflow"}`` when events were lost (the
kernel's queue overflowed while the host was not reading: DATA waits for the host's window, so a
slow host costs the guest nothing but the kernel's bounded queue). The stream ends (CLOSE) when
the folder itself is removed or moved.

Bounds: ``MAX_STREAMS`` watch streams at once, ``MAX_WATCHES`` watched folders in all of them,
``MAX_WALK`` entries looked at under one folder (``too_many_watches``: refused at the start, or
the stream ended when a tree outgrows them)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from typing import ClassVar

from . import protocol as p
from .errors import AgentRequestError
from .files import check_path
from .inotify import Event, Inotify, Tree, folders_below, records
from .stream import Send, Stream

MAX_STREAMS = 64
MAX_WATCHES = 8192  # folders, all streams together
MAX_WALK = 100_000  # entries looked at under a folder to watch (a recursive start, a new folder)


def lines(events: list[Event], overflow: bool) -> bytes:
    """The DATA of one read: its events, a run of the same event once, then any overflow."""
    out: list[bytes] = []
    last: Event | None = None
    for event in events:
        if event != last:
            out.append(json.dumps({"name": event.name, "type": event.type}).encode() + b"\n")
        last = event
    if overflow:
        out.append(b'{"type":"overflow"}\n')
    return b"".join(out)


class WatchStream(Stream):
    kind = "watch"
    streams: ClassVar[int] = 0  # open in this agent
    watches: ClassVar[int] = 0  # folders watched by all of them

    def __init__(self, stream_id: int, params: p.JsonDict, send: Send) -> None:
        super().__init__(stream_id, params, send)
        self._inotify: Inotify | None = None
        self._tree = Tree(self.params.get("recursive") is True)
        self._counted = False

    async def run(self) -> None:
        root = check_path(self.params.get("path"))
        if WatchStream.streams >= MAX_STREAMS:
            raise AgentRequestError("too_many_watches", f"at most {MAX_STREAMS} watches at once")
        WatchStream.streams += 1
        self._counted = True
        try:
            self._inotify = Inotify()
        except OSError as exc:
            raise AgentRequestError.from_os_error(exc) from None
        self._watch(root, "")
        if self._tree.recursive:
            self._watch_below(root, "", made=False)
        self.send_msg("watching")
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(self._inotify.fd, readable.set)
        try:
            while True:
                await readable.wait()
                readable.clear()
                if not await self._handle(root, self._inotify.read()):
                    return
        finally:
            loop.remove_reader(self._inotify.fd)

    def _watch(self, root: str, rel: str) -> bool:
        """Watch one folder; False if it is gone (or not a folder) meanwhile."""
        assert self._inotify is not None
        if WatchStream.watches >= MAX_WATCHES:
            raise AgentRequestError(
                "too_many_watches", f"at most {MAX_WATCHES} folders watched at once"
            )
        try:
            wd = self._inotify.add(os.path.join(root, rel) if rel else root)
        except OSError as exc:
            if rel and exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return False
            if exc.errno == errno.ENOSPC:  # the kernel's own limit of watches
                raise AgentRequestError("too_many_watches", str(exc)) from None
            raise AgentRequestError.from_os_error(exc) from None
        if wd not in self._tree.folders:
            WatchStream.watches += 1
        self._tree.add(wd, rel)
        return True

    def _watch_below(self, root: str, rel: str, made: bool) -> list[Event]:
        """Watch every folder under `rel`; what a folder just `made` already holds (made before
        its watch was in place) is reported as created."""
        found: list[Event] = []
        for seen, (child, is_dir) in enumerate(folders_below(root, rel)):
            if seen >= MAX_WALK:
                raise AgentRequestError(
                    "too_many_watches", f"more than {MAX_WALK} entries under {root}/{rel}"
                )
            if made:
                found.append(Event(child, "create"))
                self._tree.reported(child)
            if is_dir:
                self._watch(root, child)
        return found

    def _forget(self, wds: list[int]) -> None:
        assert self._inotify is not None
        for wd in wds:
            if self._tree.folders.pop(wd, None) is not None:
                WatchStream.watches -= 1
                self._inotify.remove(wd)

    async def _handle(self, root: str, buf: bytes) -> bool:
        """Send what one read means; False once the watched folder is gone."""
        events: list[Event] = []
        overflow = gone = False
        for record in records(buf):
            meaning = self._tree.meaning(record)
            events += meaning.events
            overflow |= meaning.overflow
            gone |= meaning.root_gone
            self._forget(meaning.forget)
            for rel in meaning.watch:
                if self._watch(root, rel):
                    events += self._watch_below(root, rel, meaning.made)
        data = lines(events, overflow)
        view = memoryview(data)
        while view:  # under the host's window: a slow host leaves events in the kernel's queue
            n = await self.send_window.take(min(len(view), p.CHUNK))
            self.send(p.Data(self.id, p.STDOUT, bytes(view[:n])))
            view = view[n:]
        return not gone

    def cleanup(self) -> None:
        if self._inotify is not None:
            WatchStream.watches -= len(self._tree.folders)
            self._tree.folders.clear()
            self._inotify.close()
        if self._counted:
            WatchStream.streams -= 1
            self._counted = False
