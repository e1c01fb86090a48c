"""Who a console request acts as: the session in its cookie, and the key that session was made
from, checked again on every request by the API's own key check (`Keys.principal_of`: revoked,
expired, request rate). Pages read with `Reader`; anything that changes something uses `Writer`,
which also checks the CSRF token and the origin. A request without a live session is sent to the
login page (`LoginNeeded`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from ..api.auditing import note_actor
from ..control.computers import Computers
from ..control.errors import AuthError, KeyRefusedError
from ..control.keys import Keys, Principal
from ..store.models import Org
from ..store.repo import ACTOR
from . import csrf
from .sessions import Session, Sessions

COOKIE = "sanbox_console"
SECURE_COOKIE = "__Host-sanbox_console"  # over HTTPS: Secure, Path=/, no Domain


class LoginNeeded(Exception):
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
    return conn.url.scheme in ("https", "wss")


def cookie_name(conn: HTTPConnection) -> str:
    return SECURE_COOKIE if secure(conn) else COOKIE


def sessions(conn: HTTPConnection) -> Sessions:
    found: Sessions = conn.app.state.console_sessions
    return found


def viewer(conn: HTTPConnection) -> Viewer:
    token = conn.cookies.get(cookie_name(conn))
    session = sessions(conn).find(token)
    if session is None:
        raise LoginNeeded()
    keys: Keys = conn.app.state.keys
    try:
        principal = keys.principal_of(session.key_id)
    except KeyRefusedError as exc:
        note_actor(conn.scope, exc.key_id, exc.key_prefix, exc.org_id)
        sessions(conn).end_key(session.key_id)
        raise LoginNeeded("ended") from exc
    except AuthError as exc:
        sessions(conn).end_key(session.key_id)
        raise LoginNeeded("ended") from exc
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
