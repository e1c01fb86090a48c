"""Host errors as the API's callers see them: a stable code and a message safe to show a tenant.

The host layer's messages carry what an operator needs (paths under the data dir, the hypervisor's
own words, errno strings); they go to the server's log with the computer they concern. A caller
gets the code and a message written for them. Errors about the caller's own request (an unknown
template, a disk smaller than its image) and a snapshot found damaged keep their message: it says
what to do instead.

The guest agent's errors are the same: its words name the host's socket or tunnel (`cannot connect
to agent at <data dir>/…/agent.sock`), and a tenant who stops the agent in its own computer would
read them. `from_agent` logs them and says what to do."""

from __future__ import annotations

import logging

from ..fleet.errors import InsufficientCapacityError
from ..host.door import AgentError, AgentTimeoutError, HostError
from .errors import (
    ConflictError,
    ControlError,
    HostUnavailableError,
    InvalidRequestError,
    NotFoundError,
    OperationTimeoutError,
    UnavailableError,
)

log = logging.getLogger(__name__)

# messages written for the caller: about their request, or about their snapshot's files (its id,
# file names and offsets; never a host path), saying what to do
CALLER: dict[str, tuple[type[ControlError], str]] = {
    "snapshot_corrupt": (ConflictError, "snapshot_corrupt"),
    "snapshot_not_found": (NotFoundError, "snapshot_not_found"),
    "template_not_found": (NotFoundError, "template_not_found"),
    "image_not_found": (NotFoundError, "template_not_found"),  # that template is not built here
    "disk_too_small": (InvalidRequestError, "disk_too_small"),
    "invalid_path": (InvalidRequestError, "invalid_path"),
}

# the host's failure: what happened, without the host's detail
SAFE: dict[str, str] = {
    "vm_start_failed": "its VM did not start",
    "hypervisor_error": "the hypervisor failed",
    "qmp_error": "the hypervisor did not do what was asked",
    "computer_not_running": "its VM is not running",
    "disk_error": "its disk could not be prepared",
    "disk_exists": "its disk already exists",
    "network_error": "its network could not be set up",
    "cgroup_error": "its resource limits could not be set",
    "confinement_failed": "its VM could not be confined",
    "pause_failed": "its memory and devices could not be saved",
    "state_unusable": "its saved memory could not be used",
    "image_error": "its image could not be used",
    "image_build_failed": "its image could not be built",
    "missing_tool": "a program the host needs is missing",
    "secret_key_unusable": "the host's secret key is unusable",
    "resolve_error": "a name could not be resolved",
    "snapshot_failed": "the snapshot could not be taken or used",
}


def from_host(exc: HostError, doing: str, computer_id: str | None = None) -> ControlError:
    """`exc`, raised while `doing` (e.g. "start"), as a ControlError; the detail is logged."""
    code = exc.code if isinstance(exc.code, str) else "host_error"
    if code == HostUnavailableError.code:  # the message names the host, never its paths
        return HostUnavailableError(f"{doing} failed: {exc}; try again shortly")
    if code == "host_full":  # its host had no room after all: the detail names host paths
        log.info("%s of %s: %s", doing, computer_id or "-", exc)
        return InsufficientCapacityError(
            f"{doing} failed: its host has no room for it now; try again later, or ask for less "
            "memory or a smaller disk"
        )
    if code in CALLER:
        kind, public = CALLER[code]
        return kind(str(exc), public)
    log.warning("%s of %s failed (%s): %s", doing, computer_id or "-", code, exc)
    what = SAFE.get(code, "the host failed")
    return ControlError(
        f"{doing} failed: {what} (code {code}); an operator finds the detail in the server's log",
        code,
    )


def from_agent(exc: Exception, computer_id: str) -> ControlError:
    """The guest agent of `computer_id` not reached, or not answering in time (504), as its
    tenant hears it: the agent client's words, unless they name the host address it was dialled
    at (`exc.where`): then they are logged and the tenant reads what to do."""
    timeout = isinstance(exc, AgentTimeoutError)
    if not isinstance(exc, AgentError) or exc.where is None:
        if timeout:
            return OperationTimeoutError(f"the guest did not answer in time: {exc}")
        return UnavailableError(f"the guest agent is unavailable: {exc}")
    if timeout:
        log.warning("guest agent of %s did not answer: %s", computer_id, exc)
        return OperationTimeoutError(
            "the guest agent did not answer in time: try again; if it goes on, restart the "
            "computer (its agent may be stuck)"
        )
    return agent_unavailable(exc, computer_id)


def agent_unavailable(exc: BaseException, computer_id: str, doing: str = "") -> UnavailableError:
    """503 `agent_unavailable` for the guest agent of `computer_id` not reached while `doing`
    ("create failed: ", say), saying what to do; why (host paths) is logged."""
    log.warning("guest agent of %s unavailable: %s%s", computer_id, doing, exc)
    return UnavailableError(
        f"{doing}the guest agent is unavailable: it cannot be reached (stopped or restarting in "
        "the computer); try again shortly, or restart the computer"
    )
