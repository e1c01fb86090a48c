"""Linux inotify through ctypes on the C library (no dependency), and the sans-IO part of watching
a directory tree: decoding the kernel's records and saying what each one is, as E2B's envd
(fsnotify) reports it.

- `Inotify`: one inotify instance (non-blocking, close-on-exec) and its watches.
- `records(buf)`: the `struct inotify_event` records in what one `read` returned.
- `Tree`: which watch is which folder of the tree (relative to its root), and what a record
  means: events (`create`, `write`, `remove`, `rename`, `chmod`), folders to watch from now on
  (recursive: a folder made or moved in), folders to forget (removed or moved out), an
  `overflow` (the kernel's queue overflowed: events were lost), the root gone.

A rename is E2B's two events: `rename` for the old name, `create` for the new one. The agent
writes a file whole (`files.py`: a temporary `.sanbox-put-…` beside it, renamed over it): the
temporary's events are not reported, and its rename is what E2B's envd reports of a write,
`create` and `write` of the file."""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from .control import libc

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

MASK = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
MASK |= IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
RECORD = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of NUL-padded name
READ_SIZE = 64 * 1024
PUT_PREFIX = ".sanbox-put-"  # the agent's temporary files (files.py)
MAX_PUTS = 1024  # renames of temporaries waiting for their other half
MAX_REPORTED = 16384  # creations reported by a walk whose own record may still come


@dataclass(frozen=True)
class Record:
    wd: int
    mask: int
    name: str  # "" for an event of the watched folder itself
    cookie: int = 0  # the same in the two halves of a rename


def records(buf: bytes) -> list[Record]:
    """The records in one `read` of an inotify descriptor (the kernel writes whole records)."""
    out: list[Record] = []
    at = 0
    while at + RECORD.size <= len(buf):
        wd, mask, cookie, length = RECORD.unpack_from(buf, at)
        raw = buf[at + RECORD.size : at + RECORD.size + length]
        out.append(Record(wd, mask, os.fsdecode(raw.split(b"\0", 1)[0]), cookie))
        at += RECORD.size + length
    return out


@dataclass(frozen=True)
class Event:
    name: str  # relative to the watched root
    type: str  # create | write | remove | rename | chmod


@dataclass
class Meaning:
    """What one record means for the watch."""

    events: list[Event] = field(default_factory=list)
    watch: list[str] = field(default_factory=list)  # folders (relative) to watch from now on
    made: bool = False  # `watch`'s folder was made (not moved in): report what it already has
    forget: list[int] = field(default_factory=list)  # watches of folders gone from the tree
    overflow: bool = False
    root_gone: bool = False


class Tree:
    """The folders of a watched tree by watch descriptor (the root is "")."""

    def __init__(self, recursive: bool) -> None:
        self.recursive = recursive
        self.folders: dict[int, str] = {}
        self._puts: set[int] = set()  # cookies of temporaries renamed away
        self._reported: set[str] = set()

    def reported(self, rel: str) -> None:
        """`rel` was reported as created by a walk of a new folder: its own record, if the
        kernel sends one (made after the folder's watch began), is not reported again."""
        if len(self._reported) >= MAX_REPORTED:
            self._reported.clear()
        self._reported.add(rel)

    def add(self, wd: int, rel: str) -> None:
        self.folders[wd] = rel

    def under(self, rel: str) -> list[int]:
        """The watches of `rel` and of every folder below it."""
        return [wd for wd, f in self.folders.items() if f == rel or f.startswith(rel + "/")]

    def meaning(self, record: Record) -> Meaning:
        m = Meaning()
        if record.mask & IN_Q_OVERFLOW:
            m.overflow = True
            return m
        folder = self.folders.get(record.wd)
        if folder is None:  # a watch already forgotten: its last records
            return m
        if not record.name:  # the folder itself
            if record.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT):
                if folder == "":
                    m.root_gone = True
                else:
                    m.forget = [record.wd]
            return m
        rel = f"{folder}/{record.name}" if folder else record.name
        is_dir = bool(record.mask & IN_ISDIR)
        if record.name.startswith(PUT_PREFIX) and not is_dir:
            if record.mask & IN_MOVED_FROM:
                if len(self._puts) >= MAX_PUTS:  # halves that never came: renamed out of view
                    self._puts.clear()
                self._puts.add(record.cookie)
            return m
        if record.mask & IN_MOVED_TO and record.cookie in self._puts:
            self._puts.discard(record.cookie)
            m.events += [Event(rel, "create"), Event(rel, "write")]
            return m
        if record.mask & IN_CREATE and rel in self._reported:
            self._reported.discard(rel)  # said by the walk, and watched by it if a folder
        elif record.mask & IN_CREATE:
            m.events.append(Event(rel, "create"))
            if is_dir and self.recursive and rel not in self.folders.values():
                m.watch, m.made = [rel], True
        if record.mask & IN_MOVED_TO:
            m.events.append(Event(rel, "create"))
            if is_dir and self.recursive:
                m.watch = [rel]
        if record.mask & IN_MODIFY:
            m.events.append(Event(rel, "write"))
        if record.mask & IN_ATTRIB:
            m.events.append(Event(rel, "chmod"))
        if record.mask & IN_MOVED_FROM:
            m.events.append(Event(rel, "rename"))
            if is_dir:
                m.forget = self.under(rel)
        if record.mask & IN_DELETE:
            m.events.append(Event(rel, "remove"))
        return m


def inotify_error(errno: int, what: str) -> OSError:
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def _c() -> ctypes.CDLL:
    c = libc()
    c.inotify_init1.argtypes = [ctypes.c_int]
    c.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    c.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return c


class Inotify:
    """One inotify instance; `close()` ends it and all its watches."""

    def __init__(self) -> None:
        fd = _c().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise inotify_error(ctypes.get_errno(), "inotify_init1")
        self.fd: int = fd

    def add(self, path: str) -> int:
        wd = _c().inotify_add_watch(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            raise inotify_error(ctypes.get_errno(), f"watching {path}")
        return int(wd)

    def remove(self, wd: int) -> None:
        _c().inotify_rm_watch(self.fd, wd)  # EINVAL for one the kernel dropped: nothing to do

    def read(self) -> bytes:
        """What the kernel has queued; b"" when nothing is."""
        try:
            return os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def folders_below(root: str, rel: str) -> Iterator[tuple[str, bool]]:
    """What is under `root/rel` (not following links), as (relative path, is a folder), folders
    before what they hold."""
    pending = [rel]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(os.path.join(root, folder)) as it:
                entries = list(it)
        except OSError:  # gone meanwhile, or unreadable: its own records tell the rest
            continue
        for e in entries:
            is_dir = e.is_dir(follow_symlinks=False)
            child = f"{folder}/{e.name}" if folder else e.name
            yield child, is_dir
            if is_dir:
                pending.append(child)
