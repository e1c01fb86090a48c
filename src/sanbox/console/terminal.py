"""Terminals: the exec WebSocket's protocol (`api/exec_protocol.py`, a PTY session per socket)
at /console/computers/{ref}/terminal, authenticated by the session cookie and refused unless the
browser says it comes from the console's own origin (cross-site WebSocket hijacking: a
WebSocket carries no CSRF header, and SameSite alone does not cover sibling subdomains)."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from ..api.routes._ws import close_with_error
from ..api.routes.exec import serve_stream
from ..control.errors import AuthError
from ..control.keys import Principal
from .access import LoginRequiredError, viewer, while_valid
from .csrf import same_origin

router = APIRouter(prefix="/console/computers")


def _principal(ws: WebSocket) -> Principal:
    try:
        return viewer(ws).principal
    except LoginRequiredError as exc:
        raise AuthError(exc.said, "unauthorized") from exc


@router.websocket("/{ref}/terminal")
async def terminal(ws: WebSocket, ref: str) -> None:
    if not same_origin(ws):
        await ws.close(code=1008, reason="cross-origin WebSocket refused")
        return
    await ws.accept()
    if ws.query_params:  # nothing rides in the URL; a stray `token` is not a way in
        await close_with_error(ws, "validation_error", "the terminal takes no query parameters")
        return
    if not await while_valid(ws, serve_stream(ws, ref, _principal)):
        await close_with_error(ws, "unauthorized", "your console session ended: log in again")
