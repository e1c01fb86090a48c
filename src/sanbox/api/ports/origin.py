"""A browser's request to a published port, authenticated by the port's cookie, must come from the
port's own page. Ports of many orgs live under one registrable domain, so the port cookie
(SameSite=Strict) goes along with a request another org's port page makes: one port's page could
read or drive another's. So, for every method and every WebSocket:

- an `Origin`, when present, must be the URL's own (same scheme, host and port); a WebSocket
  must carry one (a browser always sends it; the WebSocket has no SameSite protection). A page
  load has none; a script's fetch across origins has one, a GET's too.
- a `Sec-Fetch-Site`, when present, must be `same-origin` or `none` (typed, a bookmark), unless
  the request is a top-level navigation (`Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest:
  document`): following a link from elsewhere opens the port's page, while a fetch, an image, a
  script or a frame from another port's page does not reach it with the cookie.

Requests with a key instead of the cookie are not a browser's doing and need neither."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import Scope

from ...control.errors import ForbiddenError
from ..fetch_site import another_pages

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_of(scheme: str, host: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(f"{scheme}://{host}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or scheme not in DEFAULT_PORTS:
        return None
    return scheme, parts.hostname.rstrip("."), port or DEFAULT_PORTS[scheme]


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether `origin` (an Origin header) is `scheme://host`, default ports spelled or not."""
    scheme_of, sep, rest = origin.strip().lower().partition("://")
    if not sep or "/" in rest:
        return False
    mine, theirs = _origin_of(scheme, host.lower()), _origin_of(scheme_of, rest)
    return mine is not None and mine == theirs


def check_origin(scope: Scope, scheme: str) -> None:
    """ForbiddenError (`cross_origin`) unless a request with the port's cookie may come from
    where its browser says it comes from."""
    headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
    origin, host = headers.get(b"origin"), headers.get(b"host", "")
    websocket = scope["type"] == "websocket"
    came_from = origin or "no origin"
    allowed = origin is not None and same_origin(origin, scheme, host)
    if origin is None and not websocket:
        site = headers.get(b"sec-fetch-site")
        came_from = f"another page ({(site or 'none').strip().lower()[:20]})"
        mode, dest = headers.get(b"sec-fetch-mode"), headers.get(b"sec-fetch-dest")
        allowed = not another_pages(site, mode, dest)
    if not allowed:
        raise ForbiddenError(
            f"a request with the port's cookie must come from the port's own page "
            f"({scheme}://{host}) or be a page load; this one came from {came_from}",
            "cross_origin",
        )
