"""Errors of the host-side agent client.

Hierarchy::

    AgentError                          base of everything raised by sanbox.host.agent
    ├── AgentUnavailableError           cannot connect; channel dead or disconnected
    ├── AgentTimeoutError               a wait ran out (also a TimeoutError)
    ├── ProtocolError                   the guest broke the protocol (malformed frames, JSON
    │                                   nested too deep, DATA beyond its window); connection
    │                                   closed, the next ``Machine.client()`` dials again
    └── RemoteError                     the agent answered with an error (.code, .message)
        ├── ExecError                   a command could not be started
        │   └── CommandNotFoundError    code command_not_found (.exit_code == 127)
        ├── FileNotFoundInGuestError    code not_found
        ├── InvalidPathError            code invalid_path (also raised before sending)
        └── ConnectionRefusedInGuestError  code connection_refused
"""

from __future__ import annotations

from typing import Any


class AgentError(Exception):
    """Base class of the agent client's errors. `where` is the host address a dial's message
    names (the agent socket's path in the data dir, a tunnel): for the server's log, never for
    a tenant (`control.host_errors.from_agent`)."""

    def __init__(self, *args: object, where: str | None = None) -> None:
        super().__init__(*args)
        self.where = where


class AgentUnavailableError(AgentError):
    """The agent cannot be reached, or the channel to it died."""


class AgentRouteError(AgentUnavailableError):
    """The way to the agent is down (a fleet host's tunnel does not answer): nothing is known of
    the guest itself, and the dial is not retried."""


class AgentTimeoutError(AgentError, TimeoutError):
    """The agent did not answer in time."""


class ProtocolError(AgentError):
    """The guest sent bytes that are not valid frames, or frames the protocol does not allow."""


class RemoteError(AgentError):
    """The agent reported an error with a stable ``code`` and a human ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ExecError(RemoteError):
    """The agent could not start a command (bad user, bad cwd, missing program, ...)."""


class CommandNotFoundError(ExecError):
    """The program does not exist or is not executable (shell exit code 127)."""

    exit_code = 127


class FileNotFoundInGuestError(RemoteError):
    """The guest path does not exist."""


class InvalidPathError(RemoteError):
    """A guest path is relative or contains ``..`` components."""

    def __init__(self, code: str = "invalid_path", message: str = "invalid path") -> None:
        super().__init__(code, message)


class ConnectionRefusedInGuestError(RemoteError):
    """Nothing listens on that port inside the guest."""


_BY_CODE: dict[str, type[RemoteError]] = {
    "command_not_found": CommandNotFoundError,
    "not_found": FileNotFoundInGuestError,
    "invalid_path": InvalidPathError,
    "connection_refused": ConnectionRefusedInGuestError,
}

_EXEC_CODES = {"invalid_cwd", "unknown_user", "spawn_failed", "permission_denied"}


def remote_error(body: dict[str, Any], *, exec_stream: bool = False) -> RemoteError:
    """Build the error for an agent MSG ``{"type": "error", "code", "message"}``."""
    code = str(body.get("code", "unknown"))
    message = str(body.get("message", ""))
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = ExecError if exec_stream and code in _EXEC_CODES else RemoteError
    return cls(code, message)
