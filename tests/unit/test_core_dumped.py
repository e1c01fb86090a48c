"""A process a signal ended and that dumped core is reported so, as envd's `os.ProcessState`
says it ("signal: segmentation fault (core dumped)"): the guest agent reads it before reaping
the process (waitid's `CLD_DUMPED`, which Popen's `returncode` drops) and sends `core_dumped`
with the exit; the host reads it (absent from an agent before it: False; a guest's other value
is a bad reply); E2B's end event adds " (core dumped)". Nothing said it: the information never
left the guest."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
from pathlib import Path

import pytest

from sanbox.e2b.running import end_event
from sanbox.guest import process
from sanbox.host.agent.errors import RemoteError
from sanbox.host.agent.process import Exit, _exit_from

pytestmark = pytest.mark.unit

SEGV_UNLIMITED = "ulimit -c unlimited; kill -SEGV $$"


def dumps_here() -> bool:
    """This kernel writes a core into the dumping process's folder (`core_pattern` a plain
    name), and a core may be as large as it likes: a test's core lands in its tmp folder."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    return "/" not in pattern and "|" not in pattern and hard == resource.RLIM_INFINITY


def ended(script: str, cwd: Path, pidfd: bool = True) -> process.Ended:
    async def main() -> process.Ended:
        proc = subprocess.Popen(["/bin/sh", "-c", script], cwd=cwd)
        return await process.exit_watch(proc)

    if pidfd:
        return asyncio.run(main())
    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(os, "pidfd_open")  # a kernel without pidfd: a thread waits
        return asyncio.run(main())


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_guest_says_a_core_was_dumped(tmp_path: Path, pidfd: bool) -> None:
    if not dumps_here():
        pytest.skip("this host writes no core into the process's folder (core_pattern, ulimit)")
    assert ended(SEGV_UNLIMITED, tmp_path, pidfd) == process.Ended(-11, True)


@pytest.mark.parametrize("pidfd", [True, False])
@pytest.mark.parametrize(
    ("script", "code"),
    [("ulimit -c 0; kill -SEGV $$", -11), ("kill -KILL $$", -9), ("exit 3", 3)],
)
def test_the_guest_says_no_core_where_none_was_dumped(
    tmp_path: Path, script: str, code: int, pidfd: bool
) -> None:
    assert ended(script, tmp_path, pidfd) == process.Ended(code, False)


def test_the_host_reads_it_and_an_agent_before_it_says_none() -> None:
    said = {"type": "exit", "exit_code": 139, "signal": 11, "timed_out": False}
    assert _exit_from({**said, "core_dumped": True}) == Exit(139, 11, False, True)
    assert _exit_from(said) == Exit(139, 11, False, False)
    with pytest.raises(RemoteError):
        _exit_from({**said, "core_dumped": "yes"})


def test_e2b_says_it_as_go_does() -> None:
    said = "signal: segmentation fault (core dumped)"
    assert end_event(139, 11, None, True) == {
        "end": {"exitCode": -1, "status": said, "error": said}
    }
    assert end_event(139, 11)["end"]["status"] == "signal: segmentation fault"
