"""Pages: the Jinja2 environment, the headers every page carries, and the route class that turns
a missing session into the login page and a control-plane error into a page in words (htmx and
the console's scripts get the API's JSON error and show its message)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute

from ..control.errors import ControlError
from .access import LoginRequiredError, Viewer

HERE = Path(__file__).parent
ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes a form POST's Origin `null`
    "Cache-Control": "no-store",
}


def age(when: datetime | None) -> str:
    if when is None:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def size(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


ENV.filters.update(age=age, size=size, urlq=lambda s: quote(str(s), safe=""))


def html(name: str, **context: Any) -> str:
    return ENV.get_template(name).render(**context)


def page(name: str, viewer: Viewer | None, status: int = 200, **context: Any) -> HTMLResponse:
    """A whole page: the layout with the session's CSRF token and what the key may see."""
    body = html(name, viewer=viewer, csrf=viewer.session.csrf if viewer else "", **context)
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def fragment(name: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(html(name, **context), headers=HEADERS)


def wants_page(request: Request) -> bool:
    """A browser navigation (not htmx, not the console's own fetches)."""
    return (
        request.method == "GET"
        and "hx-request" not in request.headers
        and ("text/html" in request.headers.get("accept", ""))
    )


def login_needed(request: Request, exc: LoginRequiredError) -> Response:
    target = f"/console/login?why={exc.why}"
    if "hx-request" in request.headers:
        return Response(status_code=204, headers={"HX-Redirect": target})
    if wants_page(request):
        return RedirectResponse(target, status_code=303)
    body = {"error": {"code": "unauthorized", "message": exc.said}}
    return JSONResponse(body, status_code=401, headers={"X-Login": target})


class ConsoleRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequiredError as exc:
                return login_needed(request, exc)
            except ControlError as exc:
                if not wants_page(request):
                    raise
                return page("error.html", None, exc.status, code=exc.code, message=str(exc))

        return run
