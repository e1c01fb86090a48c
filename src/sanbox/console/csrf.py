"""Cross-site request checks of the console.

Every request that changes something carries the session's synchronizer token in the
`X-CSRF-Token` header (the pages put it in `<body hx-headers>` for htmx and in a `<meta>` for
the console's own scripts) and comes from the console's own origin (`Origin`, or
`Sec-Fetch-Site: same-origin`). A header cannot be set by a plain cross-site form, and the token
is kept on the server, not in a cookie a sibling subdomain (a published port) could set.
WebSockets carry no custom headers: they are checked by `Origin` and the session cookie, whose
SameSite=Strict keeps it off cross-site requests."""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection

from ..api.forwarded import forwarded_proto
from ..control.errors import ForbiddenError

HEADER = "x-csrf-token"


def own_origin(conn: HTTPConnection) -> str:
    """The origin the console is served on, as the browser sees it (scheme and Host): behind a
    trusted proxy that ends TLS (`SANBOX_TRUSTED_PROXIES`), the scheme it says it spoke."""
    return f"{forwarded_proto(conn.scope)}://{conn.headers.get('host', '')}"


def same_origin(conn: HTTPConnection) -> bool:
    origin = conn.headers.get("origin")
    if origin is not None:
        return origin == own_origin(conn)
    return conn.headers.get("sec-fetch-site") == "same-origin"


def check_origin(conn: HTTPConnection) -> None:
    if not same_origin(conn):
        raise ForbiddenError(
            "this request did not come from the console's own page (Origin mismatch): reload "
            "the console and try again",
            "csrf_failed",
        )


def check_token(conn: HTTPConnection, expected: str) -> None:
    check_origin(conn)
    sent = conn.headers.get(HEADER, "")
    if not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise ForbiddenError(
            "this request lacks the page's CSRF token: reload the console and try again",
            "csrf_failed",
        )
