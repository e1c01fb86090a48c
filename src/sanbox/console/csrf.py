"""Cross-site request checks of the console.

Every request that changes something carries the session's synchronizer token in the
`X-CSRF-Token` header (the pages put it in `<body hx-headers>` for htmx and in a `<meta>` for
the console's own scripts) and comes from the console's own origin (`Origin`, or
`Sec-Fetch-Site: same-origin`). A header cannot be set by a plain cross-site form, and the token
is kept on the server, not in a cookie a sibling subdomain (a published port) could set.
WebSockets carry no custom headers: they are checked by `Origin` and the session cookie, whose
SameSite=Strict keeps it off cross-site requests.

Reads are checked too, before their session is read (`check_fetch_site`): SameSite=Strict does
not keep the cookie off a sibling subdomain's requests (a published port's page is same-site),
and each request a session makes takes one from its key's request rate, so such a page could
loop `fetch(..., {mode: "no-cors", credentials: "include"})` until the key's own CLI and agents
are refused 429. The browser says who asked (`Sec-Fetch-Site`); a request that says nothing
(an older browser, a tool, any browser over plain HTTP: it is sent to HTTPS and localhost
origins only) is let through."""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection

from ..api.fetch_site import another_pages
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


def check_fetch_site(conn: HTTPConnection) -> None:
    """Refuse a request another site's page made (`Sec-Fetch-Site` neither `same-origin` nor
    `none`, a typed address or a bookmark), unless it is a top-level navigation to a page (a link
    to the console followed from elsewhere)."""
    headers = conn.headers
    site = headers.get("sec-fetch-site")
    if another_pages(site, headers.get("sec-fetch-mode"), headers.get("sec-fetch-dest")):
        raise ForbiddenError(
            f"this request was made by another site's page (Sec-Fetch-Site: "
            f"{(site or '')[:20]}): open the console from its own page and try again",
            "csrf_failed",
        )


def check_token(conn: HTTPConnection, expected: str) -> None:
    """The session's token in the request's header (its origin is `check_origin`'s)."""
    sent = conn.headers.get(HEADER, "")
    if not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise ForbiddenError(
            "this request lacks the page's CSRF token: reload the console and try again",
            "csrf_failed",
        )
