"""Who a console request acts as: the session in its cookie, and the key that session was made
from, checked again on every request by the API's own key check (`Keys.principal_of`: revoked,
expired, request rate). Pages read with `Reader`, which first refuses what another site's page
asked for (Fetch Metadata); anything that changes something uses `Writer`, which checks the
origin first and then the CSRF token. Both refuse before the session is read, so another site
cannot spend the key's request rate. A request without a live session is sent to the login page
(`LoginRequiredError`).

Over plain HTTP the session cookie cannot be `__Host-`: a published port's page (a sibling
subdomain) can set a cookie of the same name for the parent domain, and the browser then sends
both. The server cannot tell which is its own, so a request that carries the name twice is
treated as logged out (`ambiguous`) rather than acted on as whichever came last (the other
site's session: what its user typed would land in that org)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from ..api.auditing import note_actor
from ..api.forwarded import forwarded_proto
from ..api.open_requests import hold
from ..api.standing import Check, chunks_while_standing, while_standing
from ..control.computers import Computers
from ..control.errors import AuthError, KeyRefusedError
from ..control.keys import Keys, Principal
from ..store.models import Org
from ..store.repo import ACTOR
from . import csrf
from .sessions import Session, Sessions

COOKIE = "sanbox_console"
SECURE_COOKIE = "__Host-sanbox_console"  # over HTTPS: Secure, Path=/, no Domain


class LoginRequiredError(Exception):
    """No live session: `why` is `required` (none or expired), `ended` (its key stopped) or
    `ambiguous` (the browser sent two session cookies: `session_token`)."""

    def __init__(self, why: str = "required") -> None:
        super().__init__(why)
        self.why = why

    @property
    def said(self) -> str:
        """What to tell a client that cannot show the login page (a socket, a script's call)."""
        if self.why == "ambiguous":
            return (
                "your browser sent two console sessions, one set by another site under this "
                "domain: clear this site's cookies and log in again"
            )
        return "your console session ended: log in again"


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


def _times_sent(headers: list[str], name: str) -> int:
    """How often the `Cookie` headers name cookie `name` (parsed as Starlette parses them)."""
    chunks = (chunk for header in headers for chunk in header.split(";"))
    return sum("=" in chunk and chunk.split("=", 1)[0].strip() == name for chunk in chunks)


def session_token(conn: HTTPConnection) -> str | None:
    """The session token the browser sent, if any; LoginRequiredError(`ambiguous`) if it sent
    the session cookie's name more than once (another site under this domain set one too)."""
    name = cookie_name(conn)
    if _times_sent(conn.headers.getlist("cookie"), name) > 1:
        raise LoginRequiredError("ambiguous")
    return conn.cookies.get(name)


def sessions(conn: HTTPConnection) -> Sessions:
    found: Sessions = conn.app.state.console_sessions
    return found


def viewer(conn: HTTPConnection, take: bool = True) -> Viewer:
    """The session's viewer, or LoginRequiredError; `take`: counted against the key's request rate
    (a live stream's re-check is not)."""
    token = session_token(conn)
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
    if take:  # a live stream's re-check holds no more than its request did
        hold(conn.scope, principal.key.id, principal.org.id)
    return Viewer(principal, session)


async def reader(request: Request) -> Viewer:
    # async: it runs in the request's own task, so the actor it sets reaches the route
    csrf.check_fetch_site(request)
    return viewer(request)


async def writer(request: Request) -> Viewer:
    csrf.check_origin(request)
    found = viewer(request)
    csrf.check_token(request, found.session.csrf)
    return found


def computers_of(conn: HTTPConnection) -> Computers:
    found: Computers = conn.app.state.computers
    return found


async def plane(request: HTTPConnection) -> Computers:  # async: no thread hop a call
    return computers_of(request)


Reader = Annotated[Viewer, Depends(reader)]
Writer = Annotated[Viewer, Depends(writer)]
Plane = Annotated[Computers, Depends(plane)]


def signed_in(conn: HTTPConnection) -> Check:
    """The check of the connection's console session (its key not revoked or expired, the
    session not ended; no request taken)."""

    def check() -> bool:
        try:
            viewer(conn, take=False)
        except LoginRequiredError:
            return False
        return True

    return check


def while_signed_in(conn: HTTPConnection, chunks: AsyncIterable[Any]) -> AsyncIterator[Any]:
    """`chunks` as they come, until they end or the connection's session does: a followed
    stream ends with its session."""
    return chunks_while_standing(signed_in(conn), chunks)


async def while_valid(conn: HTTPConnection, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` (a socket's session) until it ends or the connection's session does; False
    if the session ended first (`work` is cancelled)."""
    return await while_standing(signed_in(conn), work)
