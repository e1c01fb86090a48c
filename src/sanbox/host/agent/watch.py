"""Watching a folder in the guest with inotify (``sanbox.guest.watch``, protocol 3): events as
they happen, a recursive watch following new folders. An agent before protocol 3 has none
(``supported`` is False): the caller lists and compares instead.

What the guest sends is a guest's word: each line is at most ``MAX_LINE`` bytes of JSON (nested
no deeper than that allows), an event's type one of ``TYPES`` and its name a relative path of at
most 4096 characters; anything else ends the watch with ``bad_reply``. The guest sends under the
stream's window, so what waits here unread is bounded by it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sanbox.guest import protocol as p

from .channel import Channel, Requests
from .errors import RemoteError

WATCH_PROTOCOL = 3
MAX_LINE = 8192
MAX_NAME = 4096
TYPES = frozenset({"create", "write", "remove", "rename", "chmod", "overflow"})


@dataclass(frozen=True)
class FsEvent:
    name: str  # relative to the watched folder ("" for an overflow)
    type: str  # create | write | remove | rename | chmod | overflow (events were lost)


def parse_line(line: bytes) -> FsEvent:
    if len(line) > MAX_LINE:
        raise RemoteError("bad_reply", f"a watch event over {MAX_LINE} bytes")
    try:
        body = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json.loads goes
        raise RemoteError("bad_reply", "a watch event is not JSON") from None
    kind = body.get("type") if isinstance(body, dict) else None
    if kind not in TYPES:
        raise RemoteError("bad_reply", f"unknown watch event {str(kind)[:40]!r}")
    if kind == "overflow":
        return FsEvent("", "overflow")
    name = body.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or name.startswith("/"):
        raise RemoteError("bad_reply", "a watch event's name is not a relative path")
    return FsEvent(name, str(kind))


class DirWatch:
    """One watch: ``next()`` is the events of the next DATA the guest sent, None once it
    ended (the folder removed or moved)."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._partial = b""

    async def next(self) -> list[FsEvent] | None:
        while (frame := await self._channel.next()) is not None:
            if isinstance(frame, p.Msg):
                self._channel.raise_if_error(frame.body)
            elif isinstance(frame, p.Data) and frame.channel == p.STDOUT:
                *whole, self._partial = (self._partial + frame.data).split(b"\n")
                if len(self._partial) > MAX_LINE:
                    raise RemoteError("bad_reply", f"a watch event over {MAX_LINE} bytes")
                events = [parse_line(line) for line in whole if line]
                if events:
                    return events
        return None

    async def close(self) -> None:
        await self._channel.close()


class Watches:
    """``client.watches``; ``hello`` is the agent's HELLO_ACK (its protocol says what it offers)."""

    def __init__(self, client: Requests, hello: dict[str, Any]) -> None:
        self._client = client
        protocol = hello.get("protocol")
        self.supported = isinstance(protocol, int) and protocol >= WATCH_PROTOCOL

    async def open(self, path: str, recursive: bool = False) -> DirWatch:
        """Watch ``path``; answered once the guest watches it (``not_found``,
        ``not_a_directory``, ``too_many_watches`` otherwise)."""
        if not self.supported:
            raise RemoteError("not_supported", "this guest's agent cannot watch folders")
        params = {"path": path, "recursive": recursive}
        channel = await self._client.open("watch", params)
        try:
            body = await channel.next_msg(30.0)
            if body is None or body.get("type") != "watching":
                raise RemoteError("bad_reply", f"agent did not start watching {path}")
        except BaseException:
            await channel.close()
            raise
        return DirWatch(channel)
