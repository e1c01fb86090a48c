"""Freezing the root filesystem for a consistent disk snapshot (FIFREEZE/FITHAW on `/`): writes
are flushed and held until the thaw. A thaw the host never sends must not hang the computer, so
every freeze arms a timer thread that thaws by itself after `timeout` seconds (a thread, not the
event loop: a loop blocked on a write to the frozen filesystem could not run it)."""

from __future__ import annotations

import errno
import fcntl
import os
import threading

from .errors import AgentRequestError

FIFREEZE = 0xC0045877  # _IOWR('X', 119, int)
FITHAW = 0xC0045878  # _IOWR('X', 120, int)
MAX_TIMEOUT = 60.0


class Freezer:
    """At most one freeze at a time; the thaw (asked for, or by the timer) ends it."""

    def __init__(self, mountpoint: str = "/") -> None:
        self.mountpoint = mountpoint
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._timer: threading.Timer | None = None

    @property
    def frozen(self) -> bool:
        return self._fd is not None

    def freeze(self, timeout: float) -> None:
        if not 0 < timeout <= MAX_TIMEOUT:
            raise AgentRequestError("bad_request", f"timeout must be in (0, {MAX_TIMEOUT:.0f}]")
        with self._lock:
            if self._fd is not None:
                raise AgentRequestError("busy", f"{self.mountpoint} is frozen already")
            try:
                fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                raise AgentRequestError.from_os_error(exc, "open") from None
            try:
                fcntl.ioctl(fd, FIFREEZE, 0)
            except OSError as exc:
                os.close(fd)
                raise AgentRequestError.from_os_error(exc, "FIFREEZE") from None
            self._fd = fd
            self._timer = threading.Timer(timeout, self.thaw)
            self._timer.daemon = True
            self._timer.start()

    def thaw(self) -> bool:
        """Thaw if frozen; returns whether it was frozen."""
        with self._lock:
            fd, self._fd = self._fd, None
            timer, self._timer = self._timer, None
            if timer is not None and timer is not threading.current_thread():
                timer.cancel()
            if fd is None:
                return False
            try:
                fcntl.ioctl(fd, FITHAW, 0)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: not frozen (thawed by someone else)
                    raise AgentRequestError.from_os_error(exc, "FITHAW") from None
            finally:
                os.close(fd)
            return True


ROOT = Freezer("/")
