"""Awaitable reads and writes on raw non-blocking file descriptors (pipes, ptys, ports)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os


async def _ready(fd: int, *, write: bool) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    if write:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await fut
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def read(fd: int, size: int) -> bytes:
    """Read up to ``size`` bytes; ``b""`` at end of file (EIO on a pty master counts as end)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _ready(fd, write=False)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await _ready(fd, write=True)
            continue
        view = view[written:]


def close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
