"""Errors of the control plane, each with a stable code and the HTTP status the API answers with.

    ControlError
    ├── NotFoundError              computer_not_found, template_not_found, not_found (404)
    ├── ConflictError              name_taken, computer_not_running, invalid_transition,
    │                              idempotency_conflict (409)
    ├── InvalidRequestError        invalid_name, insufficient_resources, disk_too_small,
    │                              invalid_path, validation_error (422)
    ├── AuthError                  unauthorized (401), forbidden (403)
    ├── UnavailableError           agent_unavailable (503)
    └── OperationTimeoutError      timeout (504)
Host errors are translated at the service boundary (`raise ... from exc`).
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


class AuthError(ControlError):
    status = 401
    code = "unauthorized"


class ForbiddenError(ControlError):
    status = 403
    code = "forbidden"


class UnavailableError(ControlError):
    status = 503
    code = "agent_unavailable"


class OperationTimeoutError(ControlError):
    status = 504
    code = "timeout"
