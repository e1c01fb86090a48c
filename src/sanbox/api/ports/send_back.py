"""The answer to a page load that came with a credential of Sanbox's in its URL (`?token=`, a view
link's `?sanbox_view_token=`): a small page that moves the browser to the same URL without it.
A meta refresh, not a redirect: a navigation the port's own page starts is same-site, so the
port's SameSite=Strict cookie set here goes along even when the link was followed from another
site (`access`)."""

from __future__ import annotations

import html

from starlette.types import Scope, Send

from .access import query_without_token


async def send_back(scope: Scope, send: Send, cookie: tuple[bytes, bytes] | None = None) -> None:
    """The page that moves the browser to the same URL without Sanbox's credentials, setting
    `cookie` if one is given. A page load never reaches
    the guest with a key in its URL, private port or public: the guest's page would have it in
    its address bar (its scripts read it, its links send it as Referer)."""
    query = query_without_token(scope.get("query_string") or b"")
    path = same_origin_path(scope.get("raw_path") or scope["path"].encode())
    location = path + (b"?" + query if query else b"")
    url = html.escape(location.decode("latin-1"), quote=True)
    body = f'<!doctype html><meta http-equiv="refresh" content="0;url={url}">\n'.encode()
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        *([cookie] if cookie is not None else []),
        (b"cache-control", b"no-store"),
        (b"referrer-policy", b"no-referrer"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def same_origin_path(raw_path: bytes) -> bytes:
    """`raw_path` as a path of this origin that no browser reads as another's: a target beginning
    `//evil.example/` (or `/\\evil.example/`: browsers take a backslash for a slash, and drop
    tabs and line breaks) is scheme-relative, another site's URL, so the leading run of those
    is one slash."""
    return b"/" + raw_path.lstrip(b"/\\\t\r\n ")
