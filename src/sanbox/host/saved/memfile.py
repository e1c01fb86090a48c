"""Guest RAM files copied with a digest, and checked when copied back or mapped.

A save copies only the RAM file's allocated extents, in chunks of at most `CHUNK` bytes on a
fixed grid, and records each chunk's keyed BLAKE3 digest (`Chunk`); `digest` records the same for
a memory file written another way (taken out of a migration stream). A restore copies the same
chunks back and checks each one before the guest can run on it (BLAKE3 runs at ~4 GB/s here, so
checking is about as cheap as the copy itself); `verify` checks a saved file in place, in one read
pass, before QEMU maps it. Several copies of one file checked where it lies (a fork's) are made
by the kernel, without digests of their own (`fill(verified=True)`). Reads are `preadv` into a
buffer, never a mapping: a disk's I/O error (or a file a VM's uid owns, cut short under it) is
an error to refuse the memory with, where a mapping would end the whole process with SIGBUS (a
mapping saved ~25 ms of a 158 MiB restore's copy here). Any data the saved file holds outside
the recorded chunks must be zeros. A mismatch raises `MemoryCorruptError`: the saved memory is
not used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import blake3

from ..data.durable import start_writeback
from ..disk.clone import data_extents

CHUNK = 4 * 1024 * 1024
THREADS = blake3.blake3.AUTO  # a thread per core: 7.9 GB/s on a 4 MiB chunk here, 4.5 on one


class MemoryCorruptError(Exception):
    """The saved memory does not match what was recorded when it was saved."""


@dataclass(frozen=True)
class Chunk:
    offset: int
    length: int
    digest: str  # hex keyed BLAKE3

    def as_list(self) -> list[int | str]:
        return [self.offset, self.length, self.digest]

    @classmethod
    def of(cls, raw: object) -> Chunk:
        if not (isinstance(raw, list) and len(raw) == 3):
            raise ValueError(f"malformed chunk record {raw!r}")
        offset, length, digest = raw
        if not (isinstance(offset, int) and isinstance(length, int) and isinstance(digest, str)):
            raise ValueError(f"malformed chunk record {raw!r}")
        if offset < 0 or not 0 < length <= CHUNK:
            raise ValueError(f"chunk record out of range {raw!r}")
        return cls(offset, length, digest)


def _pieces(extents: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The extents cut on the CHUNK grid: (offset, length), each within one grid cell."""
    pieces = []
    for start, end in extents:
        pos = start
        while pos < end:
            stop = min(end, (pos // CHUNK + 1) * CHUNK)
            pieces.append((pos, stop - pos))
            pos = stop
    return pieces


def _read_exactly(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            raise MemoryCorruptError(f"the saved memory ends early, at {offset + done}")
        done += n


def _write_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _digest(key: bytes, data: memoryview) -> str:
    return blake3.blake3(data, key=key, max_threads=THREADS).hexdigest()


def save(src: Path, dst: Path, key: bytes) -> list[Chunk]:
    """Copy the allocated parts of `src` to a new `dst` (0600, holes kept) and digest them."""
    buf = bytearray(CHUNK)
    chunks: list[Chunk] = []
    src_fd = os.open(src, os.O_RDONLY)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = os.fstat(src_fd).st_size
            os.ftruncate(dst_fd, size)
            for offset, length in _pieces(data_extents(src_fd, size)):
                view = memoryview(buf)[:length]
                _read_exactly(src_fd, view, offset)
                _write_all(dst_fd, view, offset)
                start_writeback(dst_fd, offset, length)  # the disk writes while this copies on
                chunks.append(Chunk(offset, length, _digest(key, view)))
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return chunks


def _check_unrecorded_zero(fd: int, size: int, chunks: list[Chunk], buf: bytearray) -> None:
    """Data in the saved file outside every recorded chunk must be zeros (never written)."""
    recorded = sorted((c.offset, c.offset + c.length) for c in chunks)
    for start, end in data_extents(fd, size):
        pos = start
        for c_start, c_end in recorded:
            if c_end <= pos or c_start >= end:
                continue
            if c_start > pos:
                _check_zero(fd, pos, c_start, buf)
            pos = max(pos, c_end)
        if pos < end:
            _check_zero(fd, pos, end, buf)


def _check_zero(fd: int, start: int, end: int, buf: bytearray) -> None:
    pos = start
    while pos < end:
        view = memoryview(buf)[: min(CHUNK, end - pos)]
        _read_exactly(fd, view, pos)
        if view.tobytes().count(0) != len(view):
            raise MemoryCorruptError(f"the saved memory was changed at {pos}: not what was saved")
        pos += len(view)


def _checked(
    fd: int, size: int, chunks: list[Chunk], key: bytes, buf: bytearray
) -> Iterator[tuple[Chunk, memoryview]]:
    """Each recorded chunk of the file open as `fd`, read into `buf` and checked against its
    digest; then everything else is checked to be zeros. MemoryCorruptError at the first fault."""
    if os.fstat(fd).st_size != size:
        raise MemoryCorruptError("the saved memory has the wrong size")
    for chunk in chunks:
        if chunk.offset + chunk.length > size:
            raise MemoryCorruptError(f"a chunk at {chunk.offset} lies past the end")
        view = memoryview(buf)[: chunk.length]
        _read_exactly(fd, view, chunk.offset)
        if _digest(key, view) != chunk.digest:
            raise MemoryCorruptError(
                f"the saved memory at {chunk.offset} does not match its digest"
            )
        yield chunk, view
    _check_unrecorded_zero(fd, size, chunks, buf)


def _sent(src_fd: int, dst_fd: int, chunk: Chunk) -> None:
    """A chunk copied by the kernel (no copy through this process), at its offset."""
    os.lseek(dst_fd, chunk.offset, os.SEEK_SET)
    done = 0
    while done < chunk.length:
        n = os.sendfile(dst_fd, src_fd, chunk.offset + done, chunk.length - done)
        if n == 0:
            raise MemoryCorruptError(f"the saved memory ends early, at {chunk.offset + done}")
        done += n


def restore(src: Path, dst: Path, size: int, chunks: list[Chunk], key: bytes) -> None:
    """Copy the recorded chunks of `src` into a new `dst` of `size` bytes, checking each."""
    try:
        fill(src, create(dst, size), size, chunks, key)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise


def create(dst: Path, size: int) -> int:
    """A new, empty `dst` of `size` bytes (0600, never through a symlink), open for `fill`: a
    process may map it at once, it is never truncated after."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fill(
    src: Path, dst_fd: int, size: int, chunks: list[Chunk], key: bytes, *, verified: bool = False
) -> None:
    """Copy the recorded chunks of `src` into the file open as `dst_fd` (made by `create`),
    each checked before it is written, or none if `src` was `verify`-ed where it lies (a file
    several copies are made of: checked once); closes `dst_fd`."""
    try:
        src_fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if verified:
                if os.fstat(src_fd).st_size != size:
                    raise MemoryCorruptError("the saved memory has the wrong size")
                for chunk in chunks:
                    _sent(src_fd, dst_fd, chunk)
            else:
                for chunk, view in _checked(src_fd, size, chunks, key, bytearray(CHUNK)):
                    _write_all(dst_fd, view, chunk.offset)
        finally:
            os.close(src_fd)
    finally:
        os.close(dst_fd)


def digest(path: Path, key: bytes) -> list[Chunk]:
    """The chunks of a sparse memory file's allocated extents, digested where it lies (a file
    just written: the disk writes it out while this reads it)."""
    buf = bytearray(CHUNK)
    chunks: list[Chunk] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        start_writeback(fd, 0, 0)  # 0: to its end
        for offset, length in _pieces(data_extents(fd, os.fstat(fd).st_size)):
            view = memoryview(buf)[:length]
            _read_exactly(fd, view, offset)
            chunks.append(Chunk(offset, length, _digest(key, view)))
    finally:
        os.close(fd)
    return chunks


def verify(path: Path, size: int, chunks: list[Chunk], key: bytes) -> None:
    """Check a saved memory file where it lies (one read pass): every recorded chunk matches its
    digest and everything else is zeros; MemoryCorruptError otherwise."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in _checked(fd, size, chunks, key, bytearray(CHUNK)):
            pass
    finally:
        os.close(fd)
