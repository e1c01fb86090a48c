"""Errors of the control plane, each with a stable code and the HTTP status the API answers with.

    ControlError
    ├── NotFoundError              computer_not_found, template_not_found, org_not_found,
    │                              key_not_found, snapshot_not_found, secret_not_found,
    │                              binding_not_found, not_found (404)
    ├── ConflictError              name_taken, computer_not_running, invalid_transition,
    │                              idempotency_conflict, last_host_admin_key,
    │                              ssh_unavailable, snapshot_corrupt, template_building,
    │                              no_build_context (409)
    ├── InvalidRequestError        invalid_name, insufficient_resources, disk_too_small,
    │                              invalid_path, invalid_public_key, invalid_spec,
    │                              invalid_context (a build context refused), invalid_secret,
    │                              validation_error (422)
    ├── PayloadTooLargeError       payload_too_large (413): a template's build context
    ├── AuthError                  unauthorized (401), forbidden (403)
    │   └── KeyRefusedError        unauthorized (401): a revoked or expired key, with the key
    ├── TooManyRequestsError       (429), with `retry_after` seconds
    │   ├── TooManyFailuresError   too_many_failures: an address past its failed authentications
    │   └── RateLimitedError       rate_limited: a key past its request rate, an org past its
    │                              MCP sessions
    ├── TooManyBuildsError         too_many_builds (429): an org's builds queued or running
    ├── InsufficientStorageError   insufficient_memory (guest RAM does not fit in the RAM dir),
    │                              insufficient_storage (a disk does not fit on the data
    │                              filesystem) (507)
    ├── OperationFailedError       pause_failed, stop_failed, delete_failed (500): the verb did
    │                              not do what was asked; the message says so and what state
    │                              the computer is in now ("...; the computer is still running")
    ├── UnavailableError           agent_unavailable (503)
    │   └── HostUnavailableError   host_unreachable (503), with `Retry-After`: the computer's
    │                              host does not answer
    └── OperationTimeoutError      timeout (504)
Host errors are translated where the verbs call the host (`host_errors.from_host`): the code
stays, the message is one a tenant may read, the detail goes to the server's log.
"""

from __future__ import annotations


class ControlError(Exception):
    status = 500
    code = "internal"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class NotFoundError(ControlError):
    status = 404
    code = "not_found"


class ConflictError(ControlError):
    status = 409
    code = "conflict"


class InvalidRequestError(ControlError):
    status = 422
    code = "validation_error"


class PayloadTooLargeError(ControlError):
    status = 413
    code = "payload_too_large"


class AuthError(ControlError):
    status = 401
    code = "unauthorized"


class KeyRefusedError(AuthError):
    """A key that exists but no longer opens anything (revoked, expired): the API records who
    tried it."""

    def __init__(self, message: str, key_id: str, key_prefix: str, org_id: str) -> None:
        super().__init__(message, "unauthorized")
        self.key_id, self.key_prefix, self.org_id = key_id, key_prefix, org_id


class TooManyRequestsError(ControlError):
    """Refused for now: the client may try again in `retry_after` seconds."""

    status = 429
    code = "too_many_requests"

    def __init__(self, message: str, retry_after: int, code: str | None = None) -> None:
        super().__init__(message, code)
        self.retry_after = retry_after


class TooManyFailuresError(TooManyRequestsError):
    code = "too_many_failures"


class RateLimitedError(TooManyRequestsError):
    code = "rate_limited"


class TooManyBuildsError(ControlError):
    """An org already has as many template builds queued or running as it may: 429."""

    status = 429
    code = "too_many_builds"


class InsufficientStorageError(ControlError):
    """This host has no room for it now (not the caller's fault, not a rate limit): 507."""

    status = 507
    code = "insufficient_storage"


class OperationFailedError(ControlError):
    """A verb that did not do what was asked (the host failed under it), even when the computer
    was left safely as it was: never answered as success. The message names the verb, why, and
    the computer's state now."""

    status = 500
    code = "operation_failed"


def failed(verb: str, why: str, now: str, code: str | None = None) -> OperationFailedError:
    """`verb failed: why; now` with the code `<verb>_failed` (or `code`)."""
    return OperationFailedError(f"{verb} failed: {why}; {now}", code or f"{verb}_failed")


def with_state(error: ControlError, now: str) -> ControlError:
    """The same error (class and code), its message ending with the computer's state now."""
    error.args = (f"{error.message}; {now}", *error.args[1:])
    return error


class ForbiddenError(ControlError):
    status = 403
    code = "forbidden"


class UnavailableError(ControlError):
    status = 503
    code = "agent_unavailable"


class HostUnavailableError(UnavailableError):
    """The host that holds the computer does not answer (or this server has no link to it yet):
    503 with `Retry-After`; nothing was done."""

    code = "host_unreachable"
    retry_after = 5


class OperationTimeoutError(ControlError):
    status = 504
    code = "timeout"
