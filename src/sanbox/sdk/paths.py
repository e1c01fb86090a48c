"""A name or id as one segment of an API path."""

from __future__ import annotations

from urllib.parse import quote

from .errors import InvalidNameError


def segment(value: str) -> str:
    """`value` as one path segment: a `?`, `#` or `/` in it stays in it. Empty, `.` and `..` are
    refused: an HTTP client folds them into the path (`/v1/computers/c/secrets/..` is sent as
    `/v1/computers/c`), so a name would name another resource, and the verb would act on it."""
    if value in ("", ".", ".."):
        raise InvalidNameError(f"{value!r} is not a name", code="invalid_name")
    return quote(value, safe="")
