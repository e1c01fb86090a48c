"""Who a console request acts as: the session in its cookie, and the key that session was made
from, checked again on every request by the API's own key check (`Keys.principal_of`: revoked,
expired, request rate). Pages read with `Reader`; anything that changes something uses `Writer`,
which also checks the CSRF token and the origin. A request without a live session is sent to the
login page (`LoginRequiredError`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from ..api.auditing import note_actor
from ..api.forwarded import forwarded_proto
from ..control.computers import Computers
from ..control.errors import AuthError, KeyRefusedError
from ..control.keys import Keys, Principal
from ..store.models import Org
from ..store.repo import ACTOR
from . import csrf
from .sessions import Session, Sessions

RECHECK = 5.0  # seconds between the checks of a live stream's or socket's session
COOKIE = "sanbox_console"
SECURE_COOKIE = "__Host-sanbox_console"  # over HTTPS: Secure, Path=/, no Domain


class LoginRequiredError(Exception):
    """No live session: `why` is `required` (none or expired) or `ended` (its key stopped)."""

    def __init__(self, why: str = "required") -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class Viewer:
    principal: Principal
    session: Session

    @property
    def org(self) -> Org:
        return self.principal.org


def secure(conn: HTTPConnection) -> bool:
    """HTTPS as the browser sees it (a trusted proxy's `X-Forwarded-Proto` included)."""
    return forwarded_proto(conn.scope) == "https"


def cookie_name(conn: HTTPConnection) -> str:
    return SECURE_COOKIE if secure(conn) else COOKIE


def sessions(conn: HTTPConnection) -> Sessions:
    found: Sessions = conn.app.state.console_sessions
    return found


def viewer(conn: HTTPConnection, take: bool = True) -> Viewer:
    """The session's viewer, or LoginRequiredError; `take`: counted against the key's request rate
    (a live stream's re-check is not)."""
    token = conn.cookies.get(cookie_name(conn))
    session = sessions(conn).find(token, touch=take)  # a page left open is not activity
    if session is None:
        raise LoginRequiredError()
    keys: Keys = conn.app.state.keys
    try:
        principal = keys.principal_of(session.key_id, take)
    except KeyRefusedError as exc:  # the session stays, so each of its pages can say why
        note_actor(conn.scope, exc.key_id, exc.key_prefix, exc.org_id)
        raise LoginRequiredError("ended") from exc
    except AuthError as exc:
        raise LoginRequiredError("ended") from exc
    note_actor(conn.scope, principal.key.id, principal.key.prefix, principal.org.id)
    ACTOR.set(principal.key.prefix)
    return Viewer(principal, session)


async def reader(request: Request) -> Viewer:
    # async: it runs in the request's own task, so the actor it sets reaches the route
    return viewer(request)


async def writer(request: Request) -> Viewer:
    found = viewer(request)
    csrf.check_token(request, found.session.csrf)
    return found


def plane(request: HTTPConnection) -> Computers:
    found: Computers = request.app.state.computers
    return found


Reader = Annotated[Viewer, Depends(reader)]
Writer = Annotated[Viewer, Depends(writer)]
Plane = Annotated[Computers, Depends(plane)]


async def still_valid(conn: HTTPConnection, every: float = RECHECK) -> None:
    """Return once the connection's session ends (logout, expiry, its key revoked or expired),
    checking every `every` seconds: a live stream or socket ends with its session."""
    while True:
        await asyncio.sleep(every)
        try:
            viewer(conn, take=False)
        except LoginRequiredError:
            return


async def while_signed_in(
    conn: HTTPConnection, chunks: AsyncIterable[Any], every: float = RECHECK
) -> AsyncIterator[Any]:
    """`chunks` as they come, until they end or the connection's session does (checked at
    least every `every` seconds, a quiet stream too): a followed stream ends with its session."""
    source = aiter(chunks)
    checked = time.monotonic()
    coming = asyncio.ensure_future(anext(source, None))
    try:
        while True:
            await asyncio.wait({coming}, timeout=every)
            if time.monotonic() - checked >= every:
                checked = time.monotonic()
                try:
                    viewer(conn, take=False)
                except LoginRequiredError:
                    return
            if not coming.done():
                continue
            chunk = coming.result()
            if chunk is None:
                return
            yield chunk
            coming = asyncio.ensure_future(anext(source, None))
    finally:
        coming.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await coming


async def while_valid(conn: HTTPConnection, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` (a socket's session) until it ends or the connection's session does; False
    if the session ended first (`work` is cancelled)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(still_valid(conn))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
            return True
        return False
    finally:
        for pending in (task, watch):
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending
