"""A browser's request to a published port, authenticated by the port's cookie, must come from the
port's own page: its `Origin` is the URL's own (same scheme, host and port). Ports of many orgs
live under one registrable domain, so `SameSite` alone lets the page of one port drive another
port's cookie; `Origin` tells them apart. Checked for every method but GET, HEAD and OPTIONS
when the header is present (browsers send it on those), and for every WebSocket, where it must
be present (a browser always sends it; the WebSocket has no SameSite protection of its own).
Requests with a key instead of the cookie are not a browser's doing and need no Origin."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import Scope

from ...control.errors import ForbiddenError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
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
    """ForbiddenError (`cross_origin`) unless the request may come with this Origin."""
    headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
    origin, host = headers.get(b"origin"), headers.get(b"host", "")
    websocket = scope["type"] == "websocket"
    if not websocket and scope["method"] in SAFE_METHODS:
        return
    if origin is None and not websocket:
        return
    if origin is None or not same_origin(origin, scheme, host):
        raise ForbiddenError(
            f"a request with the port's cookie must come from the port's own page "
            f"({scheme}://{host}); this one came from {origin or 'no origin'}",
            "cross_origin",
        )
