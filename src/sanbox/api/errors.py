"""Every error response is {"error": {"code", "message"}} with a stable code; the internal cause
goes to the log, not to the client."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..control.errors import ControlError, HostUnavailableError, TooManyRequestsError
from ..host.errors import HostError
from .fleet_metrics import count_failure
from .standing import Lapsed

log = logging.getLogger(__name__)

_HTTP_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def error_headers(exc: ControlError) -> dict[str, str] | None:
    """`Retry-After` for a refusal that ends in time (failed authentications, a key's rate)."""
    if isinstance(exc, (TooManyRequestsError, HostUnavailableError)):
        return {"Retry-After": str(exc.retry_after)}
    return None


def install(app: FastAPI) -> None:
    @app.exception_handler(ControlError)
    async def control_error(request: Request, exc: ControlError) -> JSONResponse:
        count_failure(request, exc.code)
        if exc.status >= 500:
            log.error("%s: %s", exc.code, exc)
        return error_response(exc.status, exc.code, exc.message, error_headers(exc))

    @app.exception_handler(HostError)
    async def host_error(request: Request, exc: HostError) -> JSONResponse:
        count_failure(request, exc.code)
        log.error("host error %s: %s", exc.code, exc)
        if exc.code == HostUnavailableError.code:  # the computer's host does not answer
            gone = HostUnavailableError(str(exc))
            return error_response(503, gone.code, gone.message, error_headers(gone))
        return error_response(500, exc.code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_r: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return error_response(422, "validation_error", "; ".join(parts) or "invalid request")

    @app.exception_handler(HTTPException)
    async def http_error(_r: Request, exc: HTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, Lapsed):  # a response cut on purpose, once it began: not an error
            log.info("%s %s cut: %s", request.method, request.url.path, exc)
            return error_response(401, "unauthorized", str(exc))
        log.exception("internal error")
        return error_response(500, "internal", "internal error: see the server log")
