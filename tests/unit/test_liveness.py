"""A look at a VM process that fails (descriptors exhausted, a transient error) is not a death:
the watcher records a computer as exited only when its VM is known to be gone, and a real exit
is still seen."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sanbox.host.drivers import Liveness
from sanbox.host.drivers.process import DetachedVm, liveness

pytestmark = pytest.mark.unit


def failing(code: int):  # type: ignore[no-untyped-def]
    def read(pid: int) -> tuple[bytes, str]:
        raise OSError(code, errno.errorcode[code])

    return read


@pytest.mark.parametrize(
    "code",
    [errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.EPERM, errno.EACCES, errno.ENOMEM, errno.EIO],
)
def test_a_look_that_failed_is_unknown_never_dead(code: int, tmp_path: Path) -> None:
    assert liveness(1, tmp_path, read=failing(code)) is Liveness.UNKNOWN


@pytest.mark.parametrize("code", [errno.ENOENT, errno.ESRCH])
def test_no_such_process_is_dead(code: int, tmp_path: Path) -> None:
    assert liveness(1, tmp_path, read=failing(code)) is Liveness.DEAD


def test_a_live_process_of_the_run_dir_is_alive_and_its_exit_is_seen(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", str(run)], stdin=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 10  # until it has exec'd: its cmdline reads empty before
        while str(run).encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
        vm = DetachedVm(proc.pid, run, "local-process")
        assert vm.liveness() is Liveness.ALIVE and vm.alive()
        assert liveness(proc.pid, tmp_path / "other") is Liveness.DEAD  # pid reuse: not ours
    finally:
        proc.communicate(b"")
    assert vm.liveness() is Liveness.DEAD and not vm.alive()


def test_a_zombie_or_a_cut_stat_line_is_dead(tmp_path: Path) -> None:
    assert liveness(1, tmp_path, read=lambda pid: (str(tmp_path).encode(), "Z")) is Liveness.DEAD

    def cut(pid: int) -> tuple[bytes, str]:
        raise IndexError("stat line cut short")

    assert liveness(1, tmp_path, read=cut) is Liveness.DEAD


def test_an_unknown_vm_is_never_signalled(tmp_path: Path) -> None:
    """`kill` refuses to signal a pid it could not check (it may be another process now)."""
    import asyncio

    from sanbox.host.drivers import VmmError

    class Unknown(DetachedVm):
        def liveness(self) -> Liveness:
            return Liveness.UNKNOWN

    with pytest.raises(VmmError, match="could not be checked"):
        asyncio.run(Unknown(1, tmp_path, "local-process").kill())
