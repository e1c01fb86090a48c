"""Errors the SDK raises: the API's error codes mapped back to classes by one table.

Hierarchy::

    SanboxError                      .code .status .message
    +-- ConnectionFailedError        the server cannot be reached (no status)
    +-- AuthenticationError          401 unauthorized
    +-- PermissionDeniedError        403 forbidden
    |   +-- QuotaExceededError       403 quota_exceeded (which quota, its limit, the use, and
    |                                how to raise it: `sanbox org quota`)
    +-- NotFoundError                404 not_found (a file in the guest), key_not_found,
    |                                org_not_found
    |   +-- ComputerNotFoundError    404 computer_not_found
    |   +-- TemplateNotFoundError    404 template_not_found
    |   +-- SnapshotNotFoundError    404 snapshot_not_found
    |   +-- SecretNotFoundError      404 secret_not_found
    |   +-- BindingNotFoundError     404 binding_not_found (the secret is not bound to it)
    +-- ConflictError                409 (also ssh_unavailable: the computer's image has no sshd)
    |   +-- NameTakenError           409 name_taken
    |   +-- ComputerNotRunningError  409 computer_not_running
    |   +-- InvalidTransitionError   409 invalid_transition
    |   +-- IdempotencyConflictError 409 idempotency_conflict
    |   +-- SnapshotCorruptError     409 snapshot_corrupt (failed its check: not restored)
    |   +-- TemplateBuildingError    409 template_building (no build of it to use yet)
    +-- InvalidRequestError          422 validation_error, invalid_public_key
    |   +-- InvalidNameError         422 invalid_name
    |   +-- InvalidPathError         422 invalid_path
    |   +-- InsufficientResourcesError 422 insufficient_resources
    |   +-- DiskTooSmallError        422 disk_too_small
    |   +-- InvalidSpecError         422 invalid_spec (the line and the reason), invalid_context
    |   +-- InvalidSecretError       422 invalid_secret (a host pattern, header or value refused;
    |                                the message never holds the value)
    +-- PayloadTooLargeError         413 payload_too_large (a request body over the server's limit)
    +-- RateLimitedError             429 too_many_failures (too many failed authentications
    |                                from this address; the message says when to try again),
    |                                too_many_open_requests (a key's or org's open streams)
    +-- ServerError                  500 internal, the host's own codes (and any unknown 5xx)
    |   +-- OperationFailedError     500 pause_failed, stop_failed, delete_failed, snapshot_failed,
    |                                operation_failed: the verb did not do it; the message says
    |                                the computer's state now
    +-- UnavailableError             503 agent_unavailable
    +-- InsufficientStorageError     507 insufficient_storage (a disk does not fit on the host),
    |                                host_full (a move's other host has no room for it now)
    |   +-- InsufficientMemoryError  507 insufficient_memory (guest RAM does not fit on the host)
    +-- RequestTimeoutError          504 timeout (also a client-side timeout, no status)
    +-- BuildFailedError             build_failed: a template build ended failed (`templates.wait`)

`error_from_response` picks the class by code (`_CODE_TO_ERROR`); an unknown code falls back
on the status, through the `default_status` each direct subclass of `SanboxError` declares.
"""

from __future__ import annotations

import json
from typing import ClassVar


class SanboxError(Exception):
    """Base of every SDK error; `code` is the API's stable error code."""

    default_status: ClassVar[int | None] = None

    def __init__(self, message: str, *, code: str = "error", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status if status is not None else self.default_status

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, {self.message!r})"


class ConnectionFailedError(SanboxError):
    """The server could not be reached."""


class AuthenticationError(SanboxError):
    default_status = 401


class PermissionDeniedError(SanboxError):
    default_status = 403


class QuotaExceededError(PermissionDeniedError):
    """Refused before anything was made: the org would go past a quota its host admin set."""


class NotFoundError(SanboxError):
    default_status = 404


class ComputerNotFoundError(NotFoundError):
    pass


class TemplateNotFoundError(NotFoundError):
    pass


class SnapshotNotFoundError(NotFoundError):
    pass


class SecretNotFoundError(NotFoundError):
    pass


class BindingNotFoundError(NotFoundError):
    pass


class ConflictError(SanboxError):
    default_status = 409


class NameTakenError(ConflictError):
    pass


class ComputerNotRunningError(ConflictError):
    pass


class InvalidTransitionError(ConflictError):
    pass


class IdempotencyConflictError(ConflictError):
    pass


class SnapshotCorruptError(ConflictError):
    pass


class InvalidRequestError(SanboxError):
    default_status = 422


class InvalidNameError(InvalidRequestError):
    pass


class InvalidPathError(InvalidRequestError):
    pass


class InsufficientResourcesError(InvalidRequestError):
    pass


class DiskTooSmallError(InvalidRequestError):
    pass


class InvalidSecretError(InvalidRequestError):
    pass


class PayloadTooLargeError(SanboxError):
    default_status = 413


class RateLimitedError(SanboxError):
    default_status = 429


class ServerError(SanboxError):
    default_status = 500


class OperationFailedError(ServerError):
    """A verb that did not do what was asked; the message says why and the computer's state now
    (e.g. "pause failed: no space left on the data filesystem; the computer is still running as
    it was")."""


class UnavailableError(SanboxError):
    default_status = 503


class InsufficientStorageError(SanboxError):
    default_status = 507


class InsufficientMemoryError(InsufficientStorageError):
    pass


class RequestTimeoutError(SanboxError):
    default_status = 504


class TemplateBuildingError(ConflictError):
    pass


class InvalidSpecError(InvalidRequestError):
    pass


class BuildFailedError(SanboxError):
    """A template build that ended failed; the message is the reason (its log has the rest)."""


_CODE_TO_ERROR: dict[str, type[SanboxError]] = {
    "unauthorized": AuthenticationError,
    "forbidden": PermissionDeniedError,
    "quota_exceeded": QuotaExceededError,
    "not_found": NotFoundError,
    "key_not_found": NotFoundError,
    "org_not_found": NotFoundError,
    "computer_not_found": ComputerNotFoundError,
    "template_not_found": TemplateNotFoundError,
    "snapshot_not_found": SnapshotNotFoundError,
    "secret_not_found": SecretNotFoundError,
    "binding_not_found": BindingNotFoundError,
    "invalid_secret": InvalidSecretError,
    "snapshot_corrupt": SnapshotCorruptError,
    "template_building": TemplateBuildingError,
    "invalid_spec": InvalidSpecError,
    "invalid_context": InvalidSpecError,
    "build_failed": BuildFailedError,
    "name_taken": NameTakenError,
    "computer_not_running": ComputerNotRunningError,
    "invalid_transition": InvalidTransitionError,
    "idempotency_conflict": IdempotencyConflictError,
    "ssh_unavailable": ConflictError,
    "validation_error": InvalidRequestError,
    "invalid_public_key": InvalidRequestError,
    "invalid_name": InvalidNameError,
    "invalid_path": InvalidPathError,
    "insufficient_resources": InsufficientResourcesError,
    "disk_too_small": DiskTooSmallError,
    "payload_too_large": PayloadTooLargeError,
    "too_many_failures": RateLimitedError,
    "too_many_builds": RateLimitedError,
    "too_many_open_requests": RateLimitedError,
    "internal": ServerError,
    "operation_failed": OperationFailedError,
    "pause_failed": OperationFailedError,
    "stop_failed": OperationFailedError,
    "delete_failed": OperationFailedError,
    "snapshot_failed": OperationFailedError,
    "agent_unavailable": UnavailableError,
    "insufficient_storage": InsufficientStorageError,
    "insufficient_memory": InsufficientMemoryError,
    "timeout": RequestTimeoutError,
    "connection_failed": ConnectionFailedError,
}

_STATUS_TO_ERROR: dict[int, type[SanboxError]] = {
    cls.default_status: cls
    for cls in SanboxError.__subclasses__()
    if cls.default_status is not None
}


def error_class(code: str | None, status: int | None) -> type[SanboxError]:
    """The class for an API error: by code, else by status, else `ServerError`/`SanboxError`."""
    if code is not None and code in _CODE_TO_ERROR:
        return _CODE_TO_ERROR[code]
    if status is not None and status in _STATUS_TO_ERROR:
        return _STATUS_TO_ERROR[status]
    if status is not None and status >= 500:
        return ServerError
    return SanboxError


ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error answer's body a client reads, the rest never read: the API's is a code and a
line, and of any other body 500 characters are said. A broken or hostile server's endless or
huge one is not held."""


def error_from_response(status: int, body: bytes) -> SanboxError:
    """Build the error for a non-2xx response whose body may or may not be the API's JSON."""
    code: str | None = None
    message = ""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        code = _as_str(payload["error"].get("code"))
        message = _as_str(payload["error"].get("message")) or ""
    elif isinstance(payload, dict) and "detail" in payload:
        message = str(payload["detail"])
    if not message:
        text = body.decode("utf-8", "replace").strip()
        message = text[:500] if text else f"HTTP {status}"
    return error_from_code(code, message, status)


def error_from_code(code: str | None, message: str, status: int | None = None) -> SanboxError:
    cls = error_class(code, status)
    fallback = f"http_{status}" if status is not None else "error"
    return cls(message, code=code or fallback, status=status)


def _as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
