"""A computer's console log, kept bounded.

QEMU appends the guest's serial console to ``logs/console.log`` itself (``-chardev
file,append=on``): the VM keeps logging while the server is down, and never blocks on a reader.
The server bounds the file by copy-truncate rotation: every ``CHECK_INTERVAL`` a sweep looks at
each computer's log, and one larger than ``ROTATE_AT`` has its last ``ROTATE_AT`` bytes moved to
``console.log.1`` (replacing it) and is truncated to zero; QEMU's next append lands at the new
end. At rest the two files hold at most ``CAP`` bytes; during a flood the live log can overshoot
by what the guest writes in one interval. Bytes the guest writes in the microseconds between the
read of the tail and the truncation are lost, an accepted cost for a log.

``lines`` reads across both files, so a tail taken just after a rotation still has the lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from ..data.layout import DataDir
from ..errors import LayoutError

CAP = 1024 * 1024
ROTATE_AT = CAP // 2
CHECK_INTERVAL = 0.25  # a flood of up to ROTATE_AT / CHECK_INTERVAL (2 MiB/s) stays within CAP
_BYTES_PER_LINE = 200  # what a tail of N lines reads back, at most

log = logging.getLogger(__name__)


def rotated(path: Path) -> Path:
    """The previous part of a log: ``console.log.1``."""
    return path.with_name(path.name + ".1")


def rotate(path: Path, rotate_at: int = ROTATE_AT) -> bool:
    """If ``path`` is larger than ``rotate_at``: its last ``rotate_at`` bytes replace
    ``path.1`` and ``path`` starts again empty. Returns whether it rotated."""
    try:
        if os.stat(path).st_size <= rotate_at:
            return False
        with open(path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= rotate_at:
                return False
            f.seek(size - rotate_at)
            tail = f.read()  # to the end as it is now, appends since the stat included
            while more := f.read():  # appended while reading: keep the window to truncate short
                tail += more
            f.truncate(0)
    except FileNotFoundError:
        return False
    older = rotated(path)
    tmp = older.with_name(older.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(tail[-rotate_at:])
    os.replace(tmp, older)
    return True


def sweep(data_dir: DataDir, rotate_at: int = ROTATE_AT) -> int:
    """Rotate every computer's console log that is over the limit; returns how many were."""
    count = 0
    for computer_id in data_dir.computer_ids():
        try:
            count += rotate(data_dir.computer(computer_id).console_log, rotate_at)
        except LayoutError:
            continue  # not a computer's folder
        except OSError as exc:
            log.warning("could not rotate the console log of %s: %s", computer_id, exc)
    return count


async def keep_bounded(data_dir: DataDir, interval: float = CHECK_INTERVAL) -> None:
    """Sweep the console logs forever (run it as a task beside the VM watcher)."""
    while True:
        try:
            await asyncio.to_thread(sweep, data_dir)
        except Exception:
            log.exception("console log sweep failed")
        await asyncio.sleep(interval)


def _tail_bytes(path: Path, limit: int) -> bytes:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit)
    return b""


def lines(path: Path, count: int = 100) -> list[str]:
    """The last ``count`` non-empty lines of a console log, read across ``path.1`` and ``path``."""
    want = min(_BYTES_PER_LINE * count, CAP)
    newest = _tail_bytes(path, want)
    older = _tail_bytes(rotated(path), want - len(newest)) if len(newest) < want else b""
    text = (older + newest).decode(errors="replace")
    return [line.rstrip() for line in text.splitlines() if line.strip()][-count:]


def tail(path: Path, count: int = 8) -> str:
    """The last lines on one line, for error messages and events."""
    return " | ".join(line.strip() for line in lines(path, count))
