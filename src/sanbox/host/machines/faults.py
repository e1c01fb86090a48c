"""Test-only crash points: the server kills itself (SIGKILL, as `kill -9` would) at a named step,
so the vm tier can check what a restart makes of each half-done operation. Inert unless armed:
the server arms it from one setting (`SANBOX_TEST_CRASH_AT`, read by `ServerSettings.from_env`
and nowhere else); production never sets it. Every step is named in `STEPS`: a name that is not
one is refused when armed, so a typo in a test cannot pass silently."""

from __future__ import annotations

import os
import signal

STEPS = frozenset(
    {
        "snapshot.vcpus_stopped",  # a snapshot or fork stopped the source's vCPUs (QMP `stop`)
        "snapshot.state_saved",  # ... and saved its device state (QEMU in `postmigrate`)
        "restore.before_identity",  # a copy (fork, restore, claim) runs with its old identity
        "restore.after_identity",  # ... its identity given, its record not running yet
        "fork.children_recorded",  # a fork's records written, nothing made on the host yet
        "pool.claimed",  # a pool member's record became the claimer's, nothing applied in the VM
    }
)

_armed: str | None = None


def arm(step: str | None) -> None:
    """Crash at `step` from now on (None: never)."""
    global _armed
    if step is not None and step not in STEPS:
        raise ValueError(f"unknown crash step {step!r}: one of {', '.join(sorted(STEPS))}")
    _armed = step


def reached(step: str) -> None:
    """The server is at `step`: if armed there, it dies now, without cleaning anything up."""
    assert step in STEPS, step
    if _armed == step:
        os.kill(os.getpid(), signal.SIGKILL)
