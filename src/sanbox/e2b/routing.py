"""What every route of E2B's control API shares: its error shape (`E2bRoute`), its key check
(`principal`, the key in `X-API-KEY`) and a sandbox looked up by id (`sandbox_row`)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from ..api.auditing import note_actor
from ..api.auth import client_address
from ..api.open_requests import hold
from ..control.computers import Computers
from ..control.errors import ControlError, KeyRefusedError, NotFoundError
from ..control.keys import Keys, Principal
from ..control.states import State
from ..store.models import ComputerRow
from ..store.repo import ACTOR
from . import identity
from .errors import rest_error

GONE = {State.DELETING, State.DELETED}  # a sandbox in these is not found


class E2bRoute(APIRoute):
    """Errors in E2B's shape, `{"code": <status>, "message"}`, whatever the route raised."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except ControlError as exc:
                status, body = rest_error(exc)
                return JSONResponse(body, status_code=status)
            except RequestValidationError as exc:
                where = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                    for e in exc.errors()[:5]
                )
                return JSONResponse({"code": 400, "message": where[:500]}, status_code=400)

        return route


def sanbox_key(header: str | None) -> str | None:
    """The Sanbox key in `X-API-KEY`: as it is, or spelt `e2b_<hex of the key>` for the SDK
    releases that refuse a key not shaped like E2B's (2.45 to 2.5x: `e2b_` and hex digits)."""
    if header is None or not header.startswith("e2b_"):
        return header
    try:
        return bytes.fromhex(header[4:]).decode()
    except ValueError:  # not hex, or not text: a key that will not be found
        return header


def principal(request: Request) -> Principal:
    """The key in `X-API-KEY`, checked as /v1 checks a bearer key."""
    keys: Keys = request.app.state.keys
    try:
        given = sanbox_key(request.headers.get("x-api-key"))
        p = keys.authenticate(given, client_address(request))
    except KeyRefusedError as exc:
        note_actor(request.scope, exc.key_id, exc.key_prefix, exc.org_id)
        raise
    note_actor(request.scope, p.key.id, p.key.prefix, p.org.id)
    ACTOR.set(p.key.prefix)
    hold(request.scope, p.key.id, p.org.id)
    return p


def _ref(sandbox_id: str) -> str:
    computer = identity.computer_id(sandbox_id)
    if computer is None:
        raise NotFoundError(f"sandbox {sandbox_id[:80]!r} not found", "computer_not_found")
    return computer


def sandbox_row(plane: Computers, p: Principal, sandbox_id: str) -> ComputerRow:
    row = plane.get(p.org, _ref(sandbox_id))
    if State(row.state) in GONE:
        raise NotFoundError(f"sandbox {sandbox_id} not found", "computer_not_found")
    return row
