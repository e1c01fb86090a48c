"""The rules of one exchange on an intercepted connection (sans-IO), besides the secret's own
header (`injection.py`) and the response scanner (`leak_scan.py`):

- TRACE and TRACK are refused (405): they answer with the request, secret and all.
- A request that a secret's value applies to asks for an identity body (`Accept-Encoding:
  identity`, every other Accept-Encoding dropped) and for the whole of it (`Range` and `If-Range`
  dropped: a value cut across two ranges would pass the scanner in two halves), and a WebSocket
  upgrade asks for no extension (compressed messages would pass the scanner unread), so the
  response can be scanned; a response with a body in another Content-Encoding is refused (502),
  as the scanner cannot read it.
- Hop-by-hop headers go neither way (the upgrade's Connection header excepted)."""

from __future__ import annotations

import h11

from .http_request import HOP_BY_HOP, NOT_UPGRADING

Headers = list[tuple[bytes, bytes]]
REFUSED_METHODS = frozenset({b"TRACE", b"TRACK"})
METHOD_REFUSAL = "TRACE and TRACK are not relayed to hosts with secrets: they echo the request"
# a compressed body, part of one, or WebSocket messages compressed (permessage-deflate)
UNSCANNED_REQUEST = {b"accept-encoding", b"range", b"if-range", b"sec-websocket-extensions"}
IDENTITY = (b"Accept-Encoding", b"identity")


def upstream_headers(headers: Headers, upgrade: bool, scanned: bool) -> Headers:
    """The guest's request headers as they go upstream, before the secrets go in."""
    if not upgrade:
        headers = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP | NOT_UPGRADING]
    if scanned:
        headers = [(n, v) for n, v in headers if n.lower() not in UNSCANNED_REQUEST]
        headers.append(IDENTITY)
    return headers


def guest_response(response: h11.Response) -> h11.Response:
    """The upstream's response as the guest gets it: hop-by-hop headers out (h11 frames it)."""
    headers = [(n, v) for n, v in response.headers.raw_items() if n.lower() not in HOP_BY_HOP]
    if any(n.lower() == b"transfer-encoding" for n, _ in headers):
        headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
    return h11.Response(status_code=response.status_code, headers=headers, reason=response.reason)


def unscannable(response: h11.Response, method: bytes) -> str | None:
    """Why the body of `response` cannot be scanned for a value (None: it can, or has none)."""
    codings = [v.strip().lower() for n, v in response.headers if n == b"content-encoding"]
    codings = [
        c for part in codings for c in part.split(b",") if c.strip() not in (b"", b"identity")
    ]
    if not codings:
        return None
    empty = [v for n, v in response.headers if n == b"content-length"] == [b"0"]
    if method == b"HEAD" or response.status_code in (204, 304) or empty:
        return None
    return "the response is compressed (identity was asked): it cannot be checked for secrets"
