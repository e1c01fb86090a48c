"""The sans-IO half of watching a folder: the kernel's records decoded, what each means as E2B's
envd reports it (a rename's two halves, the agent's whole-file writes, folders to follow or
forget, an overflow), the lines the agent sends, and the host's reading of a hostile guest's."""

from __future__ import annotations

import struct

import pytest

from sanbox.guest import inotify as ino
from sanbox.guest.inotify import Event, Record, Tree, records
from sanbox.guest.watch import lines
from sanbox.host.agent.errors import RemoteError
from sanbox.host.agent.watch import FsEvent, parse_line

pytestmark = pytest.mark.unit


def raw(wd: int, mask: int, name: str = "", cookie: int = 0) -> bytes:
    encoded = name.encode()
    padded = encoded + b"\0" * (16 - len(encoded) % 16) if name else b""
    return struct.pack("iIII", wd, mask, cookie, len(padded)) + padded


def test_records_are_decoded_from_one_read() -> None:
    buf = raw(1, ino.IN_CREATE, "a.txt") + raw(1, ino.IN_DELETE_SELF) + raw(-1, ino.IN_Q_OVERFLOW)
    assert records(buf) == [
        Record(1, ino.IN_CREATE, "a.txt"),
        Record(1, ino.IN_DELETE_SELF, ""),
        Record(-1, ino.IN_Q_OVERFLOW, ""),
    ]
    assert records(buf[:10]) == []  # never a torn record


def tree(recursive: bool = True) -> Tree:
    t = Tree(recursive)
    t.add(1, "")
    t.add(2, "sub")
    t.add(3, "sub/deeper")
    return t


def test_each_kind_of_record_is_e2bs_event_by_its_relative_path() -> None:
    t = tree()
    for mask, kind in [
        (ino.IN_CREATE, "create"),
        (ino.IN_MODIFY, "write"),
        (ino.IN_ATTRIB, "chmod"),
        (ino.IN_DELETE, "remove"),
        (ino.IN_MOVED_FROM, "rename"),
        (ino.IN_MOVED_TO, "create"),
    ]:
        assert t.meaning(Record(3, mask, "f")).events == [Event("sub/deeper/f", kind)]
    assert t.meaning(Record(1, ino.IN_CREATE, "top")).events == [Event("top", "create")]


def test_folders_made_or_moved_in_are_followed_and_moved_out_forgotten() -> None:
    t = tree()
    made = t.meaning(Record(2, ino.IN_CREATE | ino.IN_ISDIR, "new"))
    assert (made.watch, made.made) == (["sub/new"], True)
    moved_in = t.meaning(Record(1, ino.IN_MOVED_TO | ino.IN_ISDIR, "came"))
    assert (moved_in.watch, moved_in.made) == (["came"], False)
    moved_out = t.meaning(Record(1, ino.IN_MOVED_FROM | ino.IN_ISDIR, "sub"))
    assert sorted(moved_out.forget) == [2, 3]
    assert t.meaning(Record(3, ino.IN_DELETE_SELF, "")).forget == [3]
    flat = Tree(recursive=False)
    flat.add(1, "")
    assert flat.meaning(Record(1, ino.IN_CREATE | ino.IN_ISDIR, "new")).watch == []


def test_what_a_walk_reported_is_not_reported_again() -> None:
    t = tree()
    t.reported("sub/new")
    assert t.meaning(Record(2, ino.IN_CREATE | ino.IN_ISDIR, "new")).events == []
    again = t.meaning(Record(2, ino.IN_CREATE | ino.IN_ISDIR, "new"))  # made anew later
    assert again.events == [Event("sub/new", "create")] and again.watch == ["sub/new"]
    watched = t.meaning(Record(2, ino.IN_CREATE | ino.IN_ISDIR, "deeper"))
    assert watched.watch == []  # watched already: not walked again


def test_the_agents_whole_file_writes_are_a_create_and_a_write() -> None:
    t = tree()
    temporary = ino.PUT_PREFIX + "x1"
    assert t.meaning(Record(1, ino.IN_CREATE, temporary)).events == []
    assert t.meaning(Record(1, ino.IN_MODIFY, temporary)).events == []
    assert t.meaning(Record(1, ino.IN_MOVED_FROM, temporary, cookie=7)).events == []
    done = t.meaning(Record(1, ino.IN_MOVED_TO, "f.txt", cookie=7))
    assert done.events == [Event("f.txt", "create"), Event("f.txt", "write")]
    other = t.meaning(Record(1, ino.IN_MOVED_TO, "g.txt", cookie=8))
    assert other.events == [Event("g.txt", "create")]  # an ordinary rename's second half


def test_overflow_the_root_gone_and_forgotten_watches() -> None:
    t = tree()
    assert t.meaning(Record(-1, ino.IN_Q_OVERFLOW, "")).overflow
    assert t.meaning(Record(1, ino.IN_DELETE_SELF, "")).root_gone
    assert t.meaning(Record(1, ino.IN_MOVE_SELF, "")).root_gone
    assert t.meaning(Record(99, ino.IN_CREATE, "late")).events == []


def test_lines_say_a_run_of_one_event_once_and_an_overflow_last() -> None:
    events = [Event("a", "write"), Event("a", "write"), Event("b", "write"), Event("a", "write")]
    assert lines(events, overflow=True).splitlines() == [
        b'{"name": "a", "type": "write"}',
        b'{"name": "b", "type": "write"}',
        b'{"name": "a", "type": "write"}',
        b'{"type":"overflow"}',
    ]


def test_the_host_reads_a_guests_lines_warily() -> None:
    assert parse_line(b'{"name": "a/b", "type": "rename"}') == FsEvent("a/b", "rename")
    assert parse_line(b'{"type": "overflow"}') == FsEvent("", "overflow")
    for bad in [
        b"not json",
        b"[]",
        b'{"name": "a", "type": "explode"}',
        b'{"name": "/etc/passwd", "type": "create"}',
        b'{"name": "", "type": "create"}',
        b'{"name": 5, "type": "create"}',
        b'{"name": "' + b"x" * 5000 + b'", "type": "create"}',
    ]:
        with pytest.raises(RemoteError) as refused:
            parse_line(bad)
        assert refused.value.code == "bad_reply"
