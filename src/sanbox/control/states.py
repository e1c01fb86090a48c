"""A computer's states and the one table of allowed transitions."""

from __future__ import annotations

from enum import StrEnum

from .errors import ConflictError


class State(StrEnum):
    CREATING = "creating"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    PAUSING = "pausing"
    PAUSED = "paused"  # memory saved, no process: by the user
    SUSPENDED = "suspended"  # memory saved, no process: by the idle watcher; woken on use
    RESUMING = "resuming"
    DELETING = "deleting"
    DELETED = "deleted"
    ERROR = "error"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.CREATING: frozenset({State.RUNNING, State.ERROR, State.DELETING}),
    State.STARTING: frozenset({State.RUNNING, State.STOPPED, State.ERROR, State.DELETING}),
    State.RUNNING: frozenset(
        {State.STOPPING, State.STOPPED, State.PAUSING, State.ERROR, State.DELETING}
    ),
    State.STOPPING: frozenset({State.STOPPED, State.ERROR, State.DELETING}),
    State.STOPPED: frozenset({State.STARTING, State.DELETING, State.ERROR}),
    State.PAUSING: frozenset(
        {State.PAUSED, State.SUSPENDED, State.RUNNING, State.STOPPED, State.ERROR}
    ),
    State.PAUSED: frozenset({State.RESUMING, State.STOPPED, State.DELETING}),
    # paused: E2B's pause of a suspended computer, its saved memory kept (no longer woken on use)
    State.SUSPENDED: frozenset({State.RESUMING, State.PAUSED, State.STOPPED, State.DELETING}),
    State.RESUMING: frozenset(
        {State.RUNNING, State.PAUSED, State.SUSPENDED, State.STOPPED, State.ERROR, State.DELETING}
    ),
    # resuming: a start that finds the memory a pause saved before its answer was lost
    State.ERROR: frozenset({State.STARTING, State.RESUMING, State.STOPPED, State.DELETING}),
    State.DELETING: frozenset({State.DELETED, State.ERROR}),  # error: its files stayed
    State.DELETED: frozenset(),
}

# the states in which a computer has memory to keep: in its VM, or saved
HAS_MEMORY = frozenset({State.RUNNING, State.PAUSED, State.SUSPENDED})

# what a user may ask for, from which states
ACTIONS: dict[str, frozenset[State]] = {
    "start": frozenset({State.STOPPED, State.ERROR, State.PAUSED, State.SUSPENDED}),
    "stop": frozenset({State.RUNNING, State.PAUSED, State.SUSPENDED}),
    "restart": frozenset({State.RUNNING, State.STOPPED, State.ERROR}),
    "pause": frozenset({State.RUNNING}),
    "resume": frozenset({State.PAUSED, State.SUSPENDED}),
    "delete": frozenset(set(State) - {State.DELETED}),
    "use": frozenset({State.RUNNING}),
    # a computer at rest or running; a memory snapshot also needs memory (running or saved)
    "snapshot": frozenset({State.RUNNING, State.STOPPED, State.PAUSED, State.SUSPENDED}),
    "fork": frozenset({State.RUNNING, State.STOPPED, State.PAUSED, State.SUSPENDED}),
    "move": frozenset({State.STOPPED}),  # its disk alone: nothing runs, no memory is saved
}


def can_transition(src: State, dst: State) -> bool:
    return dst in TRANSITIONS[src]


def check_transition(src: State, dst: State) -> None:
    if not can_transition(src, dst):
        raise ConflictError(f"a computer cannot go from {src} to {dst}", "invalid_transition")


def check_action(action: str, state: State, name: str) -> None:
    if state in ACTIONS[action]:
        return
    if action == "use":
        verb = "resume" if state == State.PAUSED else "start"
        raise ConflictError(
            f"computer {name} is {state}, not running: run `sanbox {verb} {name}` first",
            "computer_not_running",
        )
    if action == "pause":
        raise ConflictError(
            f"cannot pause computer {name}: it is {state}, and only a running computer can be "
            "paused",
            "invalid_transition",
        )
    if action == "move":
        raise ConflictError(
            f"cannot move computer {name} while it is {state}: a computer moves stopped, "
            f"its disk alone; run `sanbox stop {name}` first",
            "invalid_transition",
        )
    if action == "resume":
        raise ConflictError(
            f"cannot resume computer {name}: it is {state}, not paused or suspended",
            "invalid_transition",
        )
    raise ConflictError(
        f"cannot {action} computer {name} while it is {state}", "invalid_transition"
    )
