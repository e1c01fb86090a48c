"""Logging in and out: an API key (typed into the form, or a one-time link `sanbox console`
made) traded for a session cookie. The key is checked by the API's own `Keys.authenticate`, so
failed attempts count against the address (`too_many_failures`) as the API's do."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from ..api.auth import client_address
from ..control.errors import AuthError, ControlError
from ..control.keys import Keys
from . import csrf
from .access import (
    COOKIE,
    SECURE_COOKIE,
    LoginRequiredError,
    Viewer,
    Writer,
    cookie_name,
    secure,
    session_token,
    sessions,
    viewer,
)
from .render import ConsoleRoute, page

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
MAX_KEY = 200
WHY = {
    "required": "Log in with an API key of your org.",
    "ended": "Your session ended: its API key was revoked or has expired. Log in with a "
    "current key (an admin of your org can make one: `sanbox key create`).",
    "out": "You are logged out.",
    "link": "That login link was used already or has expired: run `sanbox console` again.",
    "ambiguous": "Your browser sent two console sessions, one set by another site under this "
    "domain (a published port's page can do that over plain HTTP): clear this site's cookies and "
    "log in again. Serve the console over HTTPS to rule this out.",
}


def _signed_in(request: Request, key_id: str) -> Response:
    token, _ = sessions(request).open(key_id)
    response = RedirectResponse("/console/computers", status_code=303)
    response.set_cookie(
        cookie_name(request),
        token,
        httponly=True,
        samesite="strict",
        secure=secure(request),
        path="/",
    )
    return response


@router.get("/login")
async def login_form(request: Request, why: str = "required") -> Response:
    return page("login.html", None, message=WHY.get(why, WHY["required"]), error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await request.form()
    key = form.get("key")
    keys: Keys = request.app.state.keys
    try:
        csrf.check_origin(request)  # a login from another site (login CSRF) is refused
        if not isinstance(key, str) or len(key) > MAX_KEY:
            raise AuthError("invalid API key", "unauthorized")
        principal = keys.authenticate(key.strip(), client_address(request))
    except ControlError as exc:
        return page("login.html", None, exc.status, message=WHY["required"], error=str(exc))
    return _signed_in(request, principal.key.id)


@router.get("/link")
async def link_form(request: Request) -> Response:
    """The page a login link opens: its token is in the URL's fragment, which the page's script
    puts in the form; a button, so a link previewer fetching it spends nothing."""
    return page("link.html", None)


@router.post("/link")
async def link_login(request: Request) -> Response:
    """Spend a login link. Unless the browser is logged in to the link's org already, it is
    asked first, naming the org and the key (and the org it is logged in to, if another): a
    link someone else made would otherwise take its user into that org's console unawares, and
    what they type there (a secret's value) or upload into it. Only the confirmed POST spends
    the link."""
    csrf.check_origin(request)
    form = await request.form()
    token = form.get("t")
    token = token if isinstance(token, str) else ""
    keys: Keys = request.app.state.keys
    key_id = sessions(request).peek_link(token)
    if key_id is None:
        return RedirectResponse("/console/login?why=link", status_code=303)
    try:
        wanted = keys.principal_of(key_id)
    except AuthError:
        return RedirectResponse("/console/login?why=ended", status_code=303)
    now = _current(request)
    same_org = now is not None and now.org.id == wanted.org.id
    if not same_org and form.get("confirm") != "yes":
        return page("link.html", None, token=token, to=wanted, now=now)
    if sessions(request).spend_link(token) is None:  # spent meanwhile, or expired
        return RedirectResponse("/console/login?why=link", status_code=303)
    return _signed_in(request, key_id)


def _current(request: Request) -> Viewer | None:
    """Who this browser is logged in as now, if anyone (two sessions sent: no one)."""
    try:
        return viewer(request, take=False)
    except LoginRequiredError:
        return None


@router.post("/logout")
async def logout(request: Request, viewer: Writer) -> Response:
    sessions(request).close(session_token(request))
    response = Response(status_code=204, headers={"HX-Redirect": "/console/login?why=out"})
    for name in (COOKIE, SECURE_COOKIE):
        response.delete_cookie(
            name, path="/", secure=name == SECURE_COOKIE, httponly=True, samesite="strict"
        )
    return response
