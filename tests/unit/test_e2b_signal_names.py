"""A process ended by a signal says it in its end event as envd does: by Go's name of the signal
(`syscall.Signal.String()`, the one `os.ProcessState.String()` uses) and exit code -1. Only the
eleven commonest had their names: SIGUSR1, SIGPWR, SIGSYS and the rest said "signal 10",
"signal 30", "signal 31"."""

from __future__ import annotations

import signal as signals

import pytest

from sanbox.e2b.running import end_event
from sanbox.e2b.signal_names import GO_NAMES, go_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("number", "said"),
    [
        (signals.SIGKILL, "signal: killed"),
        (signals.SIGTERM, "signal: terminated"),
        (signals.SIGSEGV, "signal: segmentation fault"),
        (signals.SIGBUS, "signal: bus error"),
        (signals.SIGTRAP, "signal: trace/breakpoint trap"),
        (signals.SIGUSR1, "signal: user defined signal 1"),
        (signals.SIGUSR2, "signal: user defined signal 2"),
        (signals.SIGSTKFLT, "signal: stack fault"),
        (signals.SIGXCPU, "signal: CPU time limit exceeded"),
        (signals.SIGXFSZ, "signal: file size limit exceeded"),
        (signals.SIGVTALRM, "signal: virtual timer expired"),
        (signals.SIGPROF, "signal: profiling timer expired"),
        (signals.SIGIO, "signal: I/O possible"),
        (signals.SIGPWR, "signal: power failure"),
        (signals.SIGSYS, "signal: bad system call"),
        (34, "signal: signal 34"),  # a real-time signal: Go has no name for it either
        (64, "signal: signal 64"),
    ],
)
def test_a_signal_s_end_says_go_s_name_and_exit_code_minus_one(number: int, said: str) -> None:
    assert end_event(128 + number, number) == {
        "end": {"exitCode": -1, "status": said, "error": said}
    }


def test_every_linux_signal_below_32_has_go_s_name() -> None:
    assert sorted(GO_NAMES) == list(range(1, 32))
    assert all(not go_name(n).startswith("signal ") for n in range(1, 32))
