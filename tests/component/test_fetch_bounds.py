"""What a package fetch may write is bounded while it writes: a tool that keeps writing is killed,
its whole process group, once its staging folder holds more than the bound (not after it has
downloaded everything), and a fetch the data filesystem has no room for above the host's reserve
is refused before a tool runs. The tool here is a stand-in for pip (`fetch_pip(python=...)`),
run unconfined (no network namespace). A sandboxed tool's child that left its process group
(`setsid`) ends with the tool (its PID namespace, root only)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.templates.fetch import FetchError, fetch_pip
from sanbox.templates.fetch_common import run_tool
from sanbox.templates.fetch_policy import reaped_argv
from sanbox.templates.fetch_sandbox import FetchSandbox

pytestmark = pytest.mark.component

# a "python" that writes 256 KiB every 10 ms into its working folder, forever, and has a child
GREEDY = f"""#!{sys.executable}
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.environ["SANBOX_TEST_PIDS"], "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}")
with open("blob", "wb") as out:
    while True:
        out.write(b"x" * 262144)
        out.flush()
        time.sleep(0.01)
"""


@pytest.fixture
def unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def sandbox(*_a: object, **_k: object) -> Iterator[FetchSandbox]:
        yield FetchSandbox(None, None, os.getuid(), os.getgid())

    monkeypatch.setattr(FetchSandbox, "open", sandbox)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False


def test_a_tool_that_keeps_writing_is_killed_at_the_bound(
    unconfined: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "python"
    tool.write_text(GREEDY)
    tool.chmod(0o755)
    pids = tmp_path / "pids"
    monkeypatch.setenv("SANBOX_TEST_PIDS", str(pids))
    cache = tmp_path / "cache"
    t0 = time.monotonic()
    with pytest.raises(FetchError, match="more than 2 MiB on the host while being fetched"):
        fetch_pip(["six"], cache, python=str(tool), max_bytes=1 << 20, timeout=8)
    assert time.monotonic() - t0 < 6  # stopped at the bound, not at the tool's timeout
    for pid in map(int, pids.read_text().split()):  # the tool and its child
        deadline = time.monotonic() + 5
        while alive(pid):
            assert time.monotonic() < deadline, f"process {pid} outlived its fetch"
            time.sleep(0.05)
    assert list((cache / "tmp").iterdir()) == []  # its staging folder is gone


def test_a_fetch_without_room_above_the_reserve_is_refused_before_a_tool_runs(
    unconfined: None, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    tool = tmp_path / "python"
    tool.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    tool.chmod(0o755)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with pytest.raises(FetchError, match="short of disk space"):
        fetch_pip(["six"], tmp_path / "cache", python=str(tool), keep_free=free)
    assert not ran.exists()


def processes_named(token: str) -> list[int]:
    """The live processes whose command line carries `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and token.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return [pid for pid in found if alive(pid)]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a PID namespace needs root and unshare (util-linux)",
)
def test_a_child_that_left_the_tools_group_ends_with_the_sandboxed_tool(tmp_path: Path) -> None:
    token = f"sanbox-orphan-{secrets.token_hex(4)}"
    ready = tmp_path / "ready"
    # a child in a session of its own (out of the group run_tool kills), ready before the tool ends
    tool = [
        "/bin/sh",
        "-c",
        f"setsid /bin/sh -c 'touch {ready}; sleep 300; true' {token} &"
        f" while [ ! -e {ready} ]; do sleep 0.02; done",
    ]
    result = run_tool(tool, work=tmp_path, timeout=30)  # the group kill alone: it escapes
    escaped = processes_named(token)
    for pid in escaped:  # and its sleep: the session it made
        os.killpg(pid, 9)
    assert result.returncode == 0 and escaped
    ready.unlink()

    result = run_tool(reaped_argv(tool), work=tmp_path, timeout=30)
    assert result.returncode == 0 and ready.exists(), result.output
    deadline = time.monotonic() + 5
    while left := processes_named(token):
        assert time.monotonic() < deadline, f"{left} outlived the sandboxed tool"
        time.sleep(0.05)
