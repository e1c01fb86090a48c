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
    DELETING = "deleting"
    DELETED = "deleted"
    ERROR = "error"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.CREATING: frozenset({State.RUNNING, State.ERROR, State.DELETING}),
    State.STARTING: frozenset({State.RUNNING, State.STOPPED, State.ERROR, State.DELETING}),
    State.RUNNING: frozenset({State.STOPPING, State.STOPPED, State.ERROR, State.DELETING}),
    State.STOPPING: frozenset({State.STOPPED, State.ERROR, State.DELETING}),
    State.STOPPED: frozenset({State.STARTING, State.DELETING, State.ERROR}),
    State.ERROR: frozenset({State.STARTING, State.STOPPED, State.DELETING}),
    State.DELETING: frozenset({State.DELETED}),
    State.DELETED: frozenset(),
}

# what a user may ask for, from which states
ACTIONS: dict[str, frozenset[State]] = {
    "start": frozenset({State.STOPPED, State.ERROR}),
    "stop": frozenset({State.RUNNING}),
    "restart": frozenset({State.RUNNING, State.STOPPED, State.ERROR}),
    "delete": frozenset(set(State) - {State.DELETED}),
    "use": frozenset({State.RUNNING}),
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
        raise ConflictError(
            f"computer {name} is {state}, not running: run `sanbox start {name}` first",
            "computer_not_running",
        )
    raise ConflictError(
        f"cannot {action} computer {name} while it is {state}", "invalid_transition"
    )
