"""`durable.start_writeback` is a hint: the bytes and what an fsync makes durable are the same
with it, on a descriptor open for writing or for reading, and a file copied with it reads back
whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sanbox.host.data import durable
from sanbox.host.saved import memfile

pytestmark = pytest.mark.unit


def test_the_hint_changes_no_byte_on_either_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(3 * 4096 + 17)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        durable.start_writeback(fd, 0, len(data))
        durable.start_writeback(fd, 4096, 0)  # 0: to the end
    finally:
        os.close(fd)
    ro = os.open(path, os.O_RDONLY)
    try:
        durable.start_writeback(ro, 0, 0)
    finally:
        os.close(ro)
    durable.fsync_path(path)
    assert path.read_bytes() == data


def test_a_copy_with_writeback_started_is_the_source_and_its_digests_match(
    tmp_path: Path,
) -> None:
    src, dst = tmp_path / "ram", tmp_path / "memory"
    with open(src, "wb") as f:
        f.truncate(24 << 20)
        for offset in (0, 5 << 20, (17 << 20) + 4096):
            f.seek(offset)
            f.write(os.urandom(1 << 20))
    key = b"k" * 32
    chunks = memfile.save(src, dst, key)
    assert dst.read_bytes() == src.read_bytes()
    assert [c.digest for c in memfile.digest(dst, key)] == [c.digest for c in chunks]
    memfile.verify(dst, 24 << 20, chunks, key)


def test_without_the_call_it_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A C library without sync_file_range (not Linux's): no call, no error."""
    monkeypatch.setattr(durable, "_sfr", None)
    path = tmp_path / "f"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        durable.start_writeback(fd, 0, 0)
    finally:
        os.close(fd)
