"""Linux's signals as envd names them in a process's end event: Go's `syscall.Signal.String()`
(its table for Linux on amd64 and arm64, which agree), used by `os.ProcessState.String()`, so
a process ended by SIGUSR1 says "signal: user defined signal 1". A number past the table (the
real-time signals, 32 to 64) is "signal N", as Go says it."""

from __future__ import annotations

GO_NAMES = {
    1: "hangup",
    2: "interrupt",
    3: "quit",
    4: "illegal instruction",
    5: "trace/breakpoint trap",
    6: "aborted",
    7: "bus error",
    8: "floating point exception",
    9: "killed",
    10: "user defined signal 1",
    11: "segmentation fault",
    12: "user defined signal 2",
    13: "broken pipe",
    14: "alarm clock",
    15: "terminated",
    16: "stack fault",
    17: "child exited",
    18: "continued",
    19: "stopped (signal)",
    20: "stopped",
    21: "stopped (tty input)",
    22: "stopped (tty output)",
    23: "urgent I/O condition",
    24: "CPU time limit exceeded",
    25: "file size limit exceeded",
    26: "virtual timer expired",
    27: "profiling timer expired",
    28: "window changed",
    29: "I/O possible",
    30: "power failure",
    31: "bad system call",
}


def go_name(signal: int) -> str:
    """What Go's `Signal.String()` says of `signal` on Linux."""
    return GO_NAMES.get(signal, f"signal {signal}")
