"""A guest flooding its serial console through a real `sanbox server`: the log stays under its
cap (rotated by the server while QEMU appends) and the computer keeps answering."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.host.machines import console

from .server import ServerProcess

pytestmark = pytest.mark.vm

FLOOD_MIB = 8  # random bytes, base64 on the serial console: ~11 MB, ~25 s under TCG


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def test_a_console_flood_leaves_the_log_under_its_cap(
    server: ServerProcess, client: Sanbox
) -> None:
    c = client.computers.create(name="noisy", memory_mib=384)
    log = server.data_dir.computer(c.id).console_log
    older = console.rotated(log)
    peak = 0
    done = threading.Event()

    def watch() -> None:  # the largest the two files ever were together, while flooding
        nonlocal peak
        while not done.is_set():
            peak = max(peak, size(log) + size(older))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        flood = f"head -c {FLOOD_MIB}M /dev/urandom | base64 > /dev/ttyS0"
        r = c.exec(flood + "; echo THE-END > /dev/ttyS0", timeout=900)
    finally:
        done.set()
        watcher.join()
    took = time.monotonic() - started
    assert r.exit_code == 0, r.stderr
    assert c.exec("echo still here").stdout == "still here\n"  # the computer still answers
    deadline = time.monotonic() + 5
    while size(log) + size(older) > console.CAP:  # the next sweep, at most CHECK_INTERVAL away
        assert time.monotonic() < deadline, (size(log), size(older))
        time.sleep(0.05)
    assert size(older) == console.ROTATE_AT
    # while flooding, at most what the guest wrote in one sweep interval over the cap
    rate = FLOOD_MIB * 1024 * 1024 * 4 / 3 / took
    assert peak <= console.CAP + 2 * rate * console.CHECK_INTERVAL + 64 * 1024, (peak, rate)
    assert c.console(lines=5)[-1] == "THE-END"  # the tail reads across the rotation
    c.delete()
