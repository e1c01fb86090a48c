"""The SDK's one code -> class table, its status fallback, and bodies that are not JSON."""

from __future__ import annotations

import json

import pytest

from sanbox.sdk import errors
from sanbox.sdk.errors import (
    AuthenticationError,
    ComputerNotFoundError,
    ComputerNotRunningError,
    ConflictError,
    DiskTooSmallError,
    IdempotencyConflictError,
    InsufficientMemoryError,
    InsufficientResourcesError,
    InsufficientStorageError,
    InvalidNameError,
    InvalidPathError,
    InvalidRequestError,
    InvalidTransitionError,
    NameTakenError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RequestTimeoutError,
    SanboxError,
    ServerError,
    TemplateNotFoundError,
    UnavailableError,
    error_from_response,
)

pytestmark = pytest.mark.unit

CONTRACT = [
    ("unauthorized", 401, AuthenticationError),
    ("forbidden", 403, PermissionDeniedError),
    ("computer_not_found", 404, ComputerNotFoundError),
    ("template_not_found", 404, TemplateNotFoundError),
    ("not_found", 404, NotFoundError),
    ("name_taken", 409, NameTakenError),
    ("invalid_name", 422, InvalidNameError),
    ("validation_error", 422, InvalidRequestError),
    ("insufficient_resources", 422, InsufficientResourcesError),
    ("disk_too_small", 422, DiskTooSmallError),
    ("invalid_path", 422, InvalidPathError),
    ("computer_not_running", 409, ComputerNotRunningError),
    ("invalid_transition", 409, InvalidTransitionError),
    ("idempotency_conflict", 409, IdempotencyConflictError),
    ("agent_unavailable", 503, UnavailableError),
    ("payload_too_large", 413, PayloadTooLargeError),
    ("timeout", 504, RequestTimeoutError),
    ("internal", 500, ServerError),
    ("insufficient_storage", 507, InsufficientStorageError),
    ("insufficient_memory", 507, InsufficientMemoryError),
]


def body(code: str, message: str = "it went wrong") -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


@pytest.mark.parametrize(("code", "status", "cls"), CONTRACT)
def test_every_contract_code_maps_to_its_class(
    code: str, status: int, cls: type[SanboxError]
) -> None:
    error = error_from_response(status, body(code, "no such thing"))
    assert type(error) is cls
    assert (error.code, error.status, error.message) == (code, status, "no such thing")
    assert str(error) == "no such thing"
    assert cls.default_status is None or cls.default_status == status
    # each class sits under the base its status names
    assert isinstance(error, errors.error_class(None, status))


def test_the_table_covers_every_contract_code_once() -> None:
    assert {code for code, _, _ in CONTRACT} <= set(errors._CODE_TO_ERROR)


def test_families_catch_their_members() -> None:
    assert issubclass(ComputerNotFoundError, NotFoundError)
    assert issubclass(NameTakenError, ConflictError)
    assert issubclass(DiskTooSmallError, InvalidRequestError)
    assert all(issubclass(c, SanboxError) for c in errors._CODE_TO_ERROR.values())


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, AuthenticationError),
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (409, ConflictError),
        (422, InvalidRequestError),
        (500, ServerError),
        (502, ServerError),
        (503, UnavailableError),
        (504, RequestTimeoutError),
        (418, SanboxError),
    ],
)
def test_an_unknown_code_falls_back_on_the_status(status: int, cls: type[SanboxError]) -> None:
    error = error_from_response(status, body("brand_new_code"))
    assert type(error) is cls
    assert error.code == "brand_new_code"
    assert error.status == status


def test_a_body_that_is_not_json_keeps_its_text_and_maps_by_status() -> None:
    error = error_from_response(502, b"<html>Bad Gateway</html>")
    assert type(error) is ServerError
    assert error.message == "<html>Bad Gateway</html>"
    assert error.code == "http_502"


def test_an_empty_body_still_says_something() -> None:
    error = error_from_response(404, b"")
    assert type(error) is NotFoundError
    assert error.message == "HTTP 404"


def test_json_that_is_not_the_error_envelope() -> None:
    error = error_from_response(422, json.dumps({"detail": "bad field"}).encode())
    assert type(error) is InvalidRequestError
    assert error.message == "bad field"
    error = error_from_response(500, b"[1, 2]")
    assert type(error) is ServerError and error.message == "[1, 2]"
