"""Linux calls Python 3.11's `os` lacks, through one handle on the C library: entering a network
namespace (`in_netns`: setns, in a thread of its own, since a thread's namespace is its own) and
whatever else a module needs from `libc()` (`data/durable.py`: sync_file_range). Nothing of
Sanbox's is imported here: the drivers use it too."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once (errno kept: `ctypes.get_errno()`)."""
    return ctypes.CDLL(None, use_errno=True)


def _enter_netns(netns: str) -> None:
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc().setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot enter namespace {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(netns: str, work: Callable[[], T]) -> T:
    """`work()`'s result, run by a short-lived thread inside the network namespace `netns` (what
    it opens there, a socket or a tap, stays there); its exception (an `OSError` if the
    namespace cannot be entered) is raised here. The caller's thread never changes namespace."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:  # this thread's namespace changes; it ends right after
        try:
            _enter_netns(netns)
            result.append(work())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
