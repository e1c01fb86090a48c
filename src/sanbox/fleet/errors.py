"""The fleet's errors, in the control plane's style (control/errors.py): a stable code each.

InsufficientCapacityError   insufficient_capacity (507): no host of the region has room
HostFullError               host_full (507): the host a move carries to has no room for it now
                            (its own admission refused it, nothing written there)
RegionMismatchError         region_mismatch (409): crossing regions, refused before any write
RegionNotAllowedError       region_not_allowed (403): a region the org may not use
BusyError                   busy (409): the computer has an incomplete operation
HostLostError               host_lost (409): a renewal from an epoch the database no longer
                            holds (declared lost, or re-registered since): register anew
StaleGenerationError        stale_generation (409): a host's report for a placement it no
                            longer holds
HostNotFoundError           host_not_found (404)
HostForgottenError          host_forgotten (409): the host that held the data was forgotten as
                            dead (`sanbox host forget`): it will not answer again; delete what
                            it held, or make it anew from a snapshot
HostStateError              host_not_lost (409): forgetting a host not declared lost;
                            invalid_host_state (409): draining a host that is not up
"""

from __future__ import annotations

from ..control.errors import (
    ConflictError,
    ForbiddenError,
    InsufficientStorageError,
    NotFoundError,
)


class InsufficientCapacityError(InsufficientStorageError):
    code = "insufficient_capacity"


class HostFullError(InsufficientStorageError):
    code = "host_full"


class RegionMismatchError(ConflictError):
    code = "region_mismatch"


class RegionNotAllowedError(ForbiddenError):
    code = "region_not_allowed"


class BusyError(ConflictError):
    code = "busy"

    def __init__(self, message: str, computer_id: str, op_id: str | None) -> None:
        super().__init__(message)
        self.computer_id, self.op_id = computer_id, op_id


class HostLostError(ConflictError):
    code = "host_lost"


class StaleGenerationError(ConflictError):
    code = "stale_generation"


class HostNotFoundError(NotFoundError):
    code = "host_not_found"


class HostForgottenError(ConflictError):
    code = "host_forgotten"

    def __init__(self, message: str, host: str) -> None:
        super().__init__(message)
        self.host = host


class HostStateError(ConflictError):
    code = "host_not_lost"
