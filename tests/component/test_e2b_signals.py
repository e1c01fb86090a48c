"""A process that a signal ends (here the stand-in guest's real processes, each killing itself)
ends as envd says it, by Go's name of the signal and exit code -1, for the uncommon signals too:
SIGUSR1, SIGPWR and SIGSYS said "signal: signal 10", "signal 30", "signal 31"; one that dumped
core says so after it, as Go does (it did not)."""

from __future__ import annotations

from typing import Any

import pytest

from sanbox.e2b import connect

from ..unit.test_core_dumped import dumps_here
from .conftest import E2bStand

pytestmark = pytest.mark.component

START = "/e2b-envd/process.Process/Start"


def end_of(e2b: E2bStand, envd: dict[str, str], msg: dict[str, Any]) -> dict[str, Any]:
    headers = {**envd, "Content-Type": connect.STREAM_TYPE, "Connect-Timeout-Ms": "20000"}
    answer = e2b.client.post(START, content=connect.envelope(msg), headers=headers)
    assert answer.status_code == 200, answer.text
    envelopes = connect.EnvelopeReader().feed(answer.content)
    assert envelopes and envelopes[-1].end, envelopes
    said = [e.message["event"] for e in envelopes if not e.end]
    return dict(said[-1]["end"])


@pytest.mark.parametrize(
    ("number", "name"),
    [
        (15, "terminated"),
        (10, "user defined signal 1"),
        (30, "power failure"),
        (31, "bad system call"),
        (34, "signal 34"),  # a real-time signal: Go names it by its number
    ],
)
@pytest.mark.parametrize("pty", [False, True])
def test_a_process_a_signal_ends_says_go_s_name_of_it(
    e2b: E2bStand, number: int, name: str, pty: bool
) -> None:
    _, envd = e2b.create()
    script = f"ulimit -c 0; kill -{number} $$; sleep 5"  # no core file, whatever the signal
    msg: dict[str, Any] = {"process": {"cmd": "/bin/sh", "args": ["-c", script]}}
    if pty:
        msg["pty"] = {"size": {"rows": 24, "cols": 80}}
    said = f"signal: {name}"
    assert end_of(e2b, envd, msg) == {"exitCode": -1, "status": said, "error": said}


@pytest.mark.parametrize("pty", [False, True])
def test_a_process_that_dumped_core_says_so(e2b: E2bStand, pty: bool) -> None:
    """As envd's `ProcessState.String()`: " (core dumped)" after the signal (it was left out)."""
    if not dumps_here():
        pytest.skip("this host writes no core into the process's folder (core_pattern, ulimit)")
    _, envd = e2b.create()
    script = "ulimit -c unlimited; kill -SEGV $$; sleep 5"  # its core goes to the test's folder
    cwd = str(e2b.scratch)
    msg: dict[str, Any] = {"process": {"cmd": "/bin/sh", "args": ["-c", script], "cwd": cwd}}
    if pty:
        msg["pty"] = {"size": {"rows": 24, "cols": 80}}
    said = "signal: segmentation fault (core dumped)"
    assert end_of(e2b, envd, msg) == {"exitCode": -1, "status": said, "error": said}
