"""Copy-on-write clones of images: reflink (FICLONE) where the filesystem supports it, a sparse
copy (only the allocated extents, via SEEK_DATA/SEEK_HOLE) otherwise."""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
from pathlib import Path
from typing import Literal

FICLONE = 0x40049409
CloneMethod = Literal["reflink", "copy"]
_NO_REFLINK = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS}


def _reflink(src_fd: int, dst_fd: int) -> bool:
    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno in _NO_REFLINK:
            return False
        raise
    return True


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The allocated (start, end) ranges of a file, by SEEK_DATA/SEEK_HOLE."""
    extents: list[tuple[int, int]] = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole remains
                break
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        extents.append((start, end))
        offset = end
    return extents


def _sparse_copy(src_fd: int, dst_fd: int, size: int) -> None:
    os.ftruncate(dst_fd, size)
    for start, end in data_extents(src_fd, size):
        copy_range(src_fd, dst_fd, start, end)


def copy_extents_but(src_fd: int, dst_fd: int, size: int, skip: list[tuple[int, int]]) -> None:
    """The allocated ranges of `src_fd` copied to the same offsets of `dst_fd`, but for the
    (start, end) ranges in `skip` (sorted, apart: what `dst_fd` holds already)."""
    for start, end in data_extents(src_fd, size):
        pos = start
        for s_start, s_end in skip:
            if s_end <= pos:
                continue
            if s_start >= end:
                break
            if s_start > pos:
                copy_range(src_fd, dst_fd, pos, s_start)
            pos = max(pos, s_end)
        if pos < end:
            copy_range(src_fd, dst_fd, pos, end)


def copy_range(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    """copy_file_range in the kernel; plain reads and writes across filesystems (EXDEV)."""
    pos = start
    while pos < end:
        try:
            n = os.copy_file_range(src_fd, dst_fd, end - pos, pos, pos)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            n = os.pwrite(dst_fd, os.pread(src_fd, min(end - pos, 4 * 1024**2), pos), pos)
        if n == 0:
            break
        pos += n


def sparse_copy_path(src: Path, dst: Path) -> None:
    """Copy src to dst (created or truncated) keeping holes; works across filesystems."""
    src_fd = os.open(src, os.O_RDONLY)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _sparse_copy(src_fd, dst_fd, os.fstat(src_fd).st_size)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def clone_file(src: Path, dst: Path) -> CloneMethod:
    """Clone src to a new file dst (must not exist); fsync it. Returns how it was cloned."""
    src_fd = os.open(src, os.O_RDONLY)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            method: CloneMethod = "reflink"
            if not _reflink(src_fd, dst_fd):
                method = "copy"
                _sparse_copy(src_fd, dst_fd, os.fstat(src_fd).st_size)
            os.fsync(dst_fd)
        except BaseException:
            os.close(dst_fd)
            dst.unlink(missing_ok=True)
            raise
        os.close(dst_fd)
    finally:
        os.close(src_fd)
    return method


def can_reflink(directory: Path) -> bool:
    """Whether files in `directory` can be reflinked (tried on two scratch files)."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = f".reflink-probe-{os.getpid()}-{secrets.token_hex(6)}"  # threads of one pid too
    a, b = directory / probe, directory / f"{probe}.clone"
    try:
        a.write_bytes(b"\0" * 4096)
        return clone_file(a, b) == "reflink"
    finally:
        a.unlink(missing_ok=True)
        b.unlink(missing_ok=True)
