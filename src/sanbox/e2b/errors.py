"""Control errors as E2B's SDK expects to hear them, in one table per side.

The REST API answers `{"code": <HTTP status>, "message"}`, the statuses E2B's API uses (the SDK
turns 404 into `SandboxNotFoundException`, 401 into `AuthenticationException`, 429 into
`RateLimitException`). envd answers Connect codes (`connect.STATUS`); the SDK turns `not_found`
into `FileNotFoundException`/`NotFoundException`, `already_exists` into a False from `make_dir`,
`invalid_argument` into `InvalidArgumentException`. A control error whose status is 500 or more
keeps its code but gets a generic message; its detail goes to the server's log (as
`control.host_errors.SAFE` does)."""

from __future__ import annotations

import logging

from ..control.errors import ControlError
from .connect import ConnectError

log = logging.getLogger(__name__)

# control status -> E2B REST status (the rest are kept)
REST_STATUS: dict[int, int] = {422: 400, 504: 503}

# (control status, control code or "*") -> Connect code
CONNECT_CODE: dict[tuple[int, str], str] = {
    (404, "*"): "not_found",
    (409, "name_taken"): "already_exists",
    (409, "*"): "failed_precondition",
    (422, "too_many_watches"): "resource_exhausted",
    (422, "*"): "invalid_argument",
    (413, "*"): "resource_exhausted",
    (401, "*"): "unauthenticated",
    (403, "*"): "permission_denied",
    (429, "*"): "resource_exhausted",
    (507, "*"): "resource_exhausted",
    (503, "*"): "unavailable",
    (504, "*"): "deadline_exceeded",
}


def safe_message(exc: ControlError, where: str) -> str:
    """`exc`'s message if it is written for the caller; else a generic one, the detail logged.
    503s and 504s say what to do (wait, try again) and are made without host detail where they
    are raised (`control.host_errors.from_agent`)."""
    if exc.status >= 500:
        log.warning("e2b %s: %s (%s)", where, exc.message, exc.code)
        if exc.status in (503, 504, 507):
            return exc.message  # written for the caller: what to do (wait, free space)
        return f"the request failed ({exc.code})"
    return exc.message


def rest_error(exc: ControlError) -> tuple[int, dict[str, object]]:
    """The status and body E2B's REST API answers for `exc`."""
    status = REST_STATUS.get(exc.status, exc.status)
    return status, {"code": status, "message": safe_message(exc, "api")}


def connect_error(exc: ControlError) -> ConnectError:
    code = CONNECT_CODE.get((exc.status, exc.code)) or CONNECT_CODE.get((exc.status, "*"))
    return ConnectError(code or "internal", safe_message(exc, "envd"))
