"""Saved memory: copied with a keyed digest per chunk, checked chunk by chunk when copied back."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from sanbox.host.saved import memfile
from sanbox.host.saved.memfile import CHUNK, MemoryCorruptError

pytestmark = pytest.mark.unit
KEY = bytes(range(32))


def sparse_ram(path: Path, size: int = 16 * CHUNK) -> dict[int, bytes]:
    """A sparse 'RAM file' with data at a few places, some across chunk boundaries."""
    written = {
        0: os.urandom(8192),
        3 * CHUNK - 4096: os.urandom(3 * 4096),
        9 * CHUNK: b"\x07" * CHUNK,
    }
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in written.items():
            f.seek(offset)
            f.write(data)
    return written


def test_round_trip_keeps_data_and_holes(tmp_path: Path) -> None:
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    sparse_ram(ram)
    chunks = memfile.save(ram, saved, KEY)
    assert all(
        c.length <= CHUNK and c.offset // CHUNK == (c.offset + c.length - 1) // CHUNK
        for c in chunks
    )
    assert saved.stat().st_blocks * 512 < 8 * CHUNK  # holes stay holes
    assert os.stat(saved).st_mode & 0o777 == 0o600
    memfile.restore(saved, back, ram.stat().st_size, chunks, KEY)
    assert back.read_bytes() == ram.read_bytes()


def test_a_file_mapped_before_it_is_filled_sees_the_copy(tmp_path: Path) -> None:
    """A restore's QEMU maps its RAM file as it starts, while the copy fills it: made at its
    size first (never truncated after), a shared mapping made then reads every copied byte."""
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    sparse_ram(ram)
    size = ram.stat().st_size
    chunks = memfile.save(ram, saved, KEY)
    fd = memfile.create(back, size)
    assert back.stat().st_size == size and os.stat(back).st_mode & 0o777 == 0o600
    with open(back, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mapped:
        memfile.fill(saved, fd, size, chunks, KEY)
        with pytest.raises(OSError):
            os.fstat(fd)  # closed by fill
        assert mapped[:] == ram.read_bytes()


def test_fill_stops_at_a_changed_chunk(tmp_path: Path) -> None:
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    written = sparse_ram(ram)
    size = ram.stat().st_size
    chunks = memfile.save(ram, saved, KEY)
    with open(saved, "r+b") as f:
        f.seek(9 * CHUNK + 100)
        f.write(b"\x01")
    fd = memfile.create(back, size)
    with pytest.raises(MemoryCorruptError):
        memfile.fill(saved, fd, size, chunks, KEY)
    with open(back, "rb") as f:  # nothing of the changed chunk was written
        f.seek(9 * CHUNK)
        assert f.read(CHUNK) == bytes(CHUNK) != written[9 * CHUNK]


@pytest.mark.parametrize("where", ["in a chunk", "in a hole", "at the end"])
def test_a_changed_byte_is_refused_and_nothing_is_left(tmp_path: Path, where: str) -> None:
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    size = 16 * CHUNK
    sparse_ram(ram, size)
    chunks = memfile.save(ram, saved, KEY)
    offset = {"in a chunk": 9 * CHUNK + 100, "in a hole": 6 * CHUNK, "at the end": size - 1}[where]
    with open(saved, "r+b") as f:
        f.seek(offset)
        f.write(b"\x01")
    with pytest.raises(MemoryCorruptError):
        memfile.restore(saved, back, size, chunks, KEY)
    assert not back.exists()


def test_another_key_is_refused(tmp_path: Path) -> None:
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    sparse_ram(ram)
    chunks = memfile.save(ram, saved, KEY)
    with pytest.raises(MemoryCorruptError, match="digest"):
        memfile.restore(saved, back, ram.stat().st_size, chunks, bytes(32))


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    sparse_ram(ram)
    chunks = memfile.save(ram, saved, KEY)
    os.truncate(saved, 5 * CHUNK)
    with pytest.raises(MemoryCorruptError, match="size"):
        memfile.restore(saved, back, ram.stat().st_size, chunks, KEY)


@pytest.mark.parametrize(
    "raw", [[0, 0, "x"], [-1, 5, "x"], [0, CHUNK + 1, "x"], ["0", 1, "x"], [0, 1]]
)
def test_malformed_chunk_records(raw: object) -> None:
    with pytest.raises(ValueError):
        memfile.Chunk.of(raw)


@pytest.mark.parametrize("where", ["in a chunk", "in a hole", "at the end"])
def test_a_changed_byte_is_found_where_the_file_lies(tmp_path: Path, where: str) -> None:
    """The check a mapped resume makes: in place, no copy; a changed byte anywhere is refused."""
    ram, saved = tmp_path / "ram", tmp_path / "saved"
    size = 16 * CHUNK
    sparse_ram(ram, size)
    chunks = memfile.save(ram, saved, KEY)
    memfile.verify(saved, size, chunks, KEY)
    offset = {"in a chunk": 3 * CHUNK - 1, "in a hole": 6 * CHUNK, "at the end": size - 1}[where]
    with open(saved, "r+b") as f:
        f.seek(offset)
        f.write(b"\x01")
    with pytest.raises(MemoryCorruptError):
        memfile.verify(saved, size, chunks, KEY)
    with pytest.raises(MemoryCorruptError, match="size"):
        memfile.verify(saved, size + CHUNK, chunks, KEY)


def test_digest_in_place_records_what_save_records(tmp_path: Path) -> None:
    """A memory file written another way (out of a migration stream) gets the same chunks."""
    ram, saved = tmp_path / "ram", tmp_path / "saved"
    sparse_ram(ram)
    assert memfile.digest(ram, KEY) == memfile.save(ram, saved, KEY)


def test_a_chunk_off_the_page_grid_is_checked_and_copied(tmp_path: Path) -> None:
    """A recorded chunk need not start on a page (a record written another way): it is checked
    and copied byte for byte, read or sent by the kernel (a file checked where it lies)."""
    saved, back, sent = tmp_path / "saved", tmp_path / "back", tmp_path / "sent"
    size = 4 * CHUNK
    data = os.urandom(3 * 4096)
    with open(saved, "wb") as f:
        f.truncate(size)
        f.seek(CHUNK + 100)
        f.write(data)
    chunk = memfile.Chunk(CHUNK + 100, len(data), memfile._digest(KEY, memoryview(data)))
    memfile.verify(saved, size, [chunk], KEY)
    memfile.restore(saved, back, size, [chunk], KEY)
    assert back.read_bytes() == saved.read_bytes()
    memfile.fill(saved, memfile.create(sent, size), size, [chunk], KEY, verified=True)
    assert sent.read_bytes() == saved.read_bytes()
    moved = memfile.Chunk(CHUNK + 101, len(data), chunk.digest)  # the same bytes a byte off
    with pytest.raises(MemoryCorruptError, match="digest"):
        memfile.verify(saved, size, [moved], KEY)


def test_a_file_cut_short_after_its_check_is_refused_by_the_copies(tmp_path: Path) -> None:
    """The copies made from a file checked where it lies (a fork's) find it cut short: refused
    as the check would, never a copy with a hole where memory was."""
    ram, saved, back = tmp_path / "ram", tmp_path / "saved", tmp_path / "back"
    sparse_ram(ram)
    size = ram.stat().st_size
    chunks = memfile.save(ram, saved, KEY)
    memfile.verify(saved, size, chunks, KEY)
    os.truncate(saved, 9 * CHUNK + 10)  # inside the last recorded chunk
    with pytest.raises(MemoryCorruptError):
        memfile.fill(saved, memfile.create(back, size), size, chunks, KEY, verified=True)
