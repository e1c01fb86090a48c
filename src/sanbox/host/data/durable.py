"""Making what was written survive a crash."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path

from ..linux import libc

_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writing the range's dirty pages, do not wait


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        call = libc().sync_file_range
    except AttributeError:  # not Linux's C library
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_sfr = _sync_file_range()


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a directory: so the renames and removals in it last)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing what was just written to `fd` at `offset` to the disk, without waiting: a
    long copy's fsync at its end then waits only for its last pieces, the disk having written
    the rest while the copy went on. Only a hint: the fsync still decides what is durable."""
    if _sfr is not None:
        _sfr(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
