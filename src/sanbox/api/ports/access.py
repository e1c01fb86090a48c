"""Who may open a published port, and what of their credentials the guest never sees.

A caller proves access to a private port with an API key (``Authorization: Bearer sbk_…``, or
``?token=`` once, from a browser) or with the port's cookie: a browser that comes with
``?token=`` is sent back to the same URL without it, holding a short-lived cookie signed by the
server for this computer and port only (host-only, HttpOnly, SameSite=Strict). The answer to
``?token=`` is a small page that moves to the URL without it (a meta refresh, not a redirect:
a navigation started by the port's own page is same-site, so the Strict cookie goes with it even
when the link was followed from another site). ``?token=KEY&sanbox_view=1`` mints a view-only
cookie: it opens safe methods only, and its WebSockets carry no client input (`rfb`). A view
link's ``?sanbox_view_token=`` (`view_link`, no API key) is traded the same way for a view-only
cookie that expires no later than the link. A page load to a public port that comes with
``?token=`` gets the same page without a cookie: a key in a guest page's URL would be read by its
scripts and sent on as its Referer.
Before anything is relayed, the request loses every credential of Sanbox's: a Sanbox bearer key,
a ``token`` that is a Sanbox key (``sbk_…``), the ``sanbox_view`` and ``sanbox_view_token`` query
parameters and the port cookie. Other ``Authorization`` headers, cookies and ``token`` values
are the guest's own and pass: a Jupyter server's ``?token=abc`` is its login, not a failed one of
Sanbox's.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from starlette.types import Scope

COOKIE = "sanbox_port"
MOST_COOKIES = 32  # port cookies a request's are looked through for one that opens the port
TOKEN_PARAM = "token"
VIEW_PARAM = "sanbox_view"  # ?sanbox_view=1 beside ?token=: the cookie opens view-only
VIEW_TOKEN_PARAM = "sanbox_view_token"  # a view link's token (`view_link`)
SANBOX_PARAMS = frozenset({VIEW_PARAM, VIEW_TOKEN_PARAM})  # and a `token` that is a key
FULL, VIEW = "full", "view"  # what a cookie opens
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
KEY_PREFIX = "sbk_"
COOKIE_TTL = 3600  # seconds
EXPIRY_DIGITS = 12  # an expiry (Unix seconds) longer than this is no expiry of ours


@dataclass(frozen=True)
class Credentials:
    key: str | None  # a Sanbox API key, from the Authorization header or ?token=
    from_query: bool  # the key came in the URL (a browser to send back without it)
    cookies: tuple[str, ...]  # the port cookies' values (a page's script may have added one)
    view_token: str | None = None  # a view link's token (?sanbox_view_token=)


def _header_values(scope: Scope, name: bytes) -> list[bytes]:
    return [v for k, v in scope.get("headers") or [] if k.lower() == name]


def sanbox_token(name: str, value: str) -> bool:
    """Whether the query parameter `name=value` is a Sanbox key (``token=sbk_…``)."""
    return name == TOKEN_PARAM and value.startswith(KEY_PREFIX)


def _sanbox_bearer(value: bytes) -> str | None:
    scheme, _, token = value.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token.startswith(KEY_PREFIX) else None


def _cookie_pairs(value: bytes) -> list[tuple[str, str]]:
    pairs = []
    for part in value.decode("latin-1").split(";"):
        name, eq, val = part.strip().partition("=")
        if name:
            pairs.append((name, val if eq else ""))
    return pairs


def credentials(scope: Scope) -> Credentials:
    key = next(
        (k for v in _header_values(scope, b"authorization") if (k := _sanbox_bearer(v))), None
    )
    query = parse_qsl((scope.get("query_string") or b"").decode("latin-1"), keep_blank_values=True)
    from_query = False
    if key is None:
        key = next((v for k, v in query if sanbox_token(k, v)), None)
        from_query = key is not None
    cookies = tuple(
        val for v in _header_values(scope, b"cookie") for n, val in _cookie_pairs(v) if n == COOKIE
    )[:MOST_COOKIES]
    view_token = next((v for k, v in query if k == VIEW_TOKEN_PARAM and v), None)
    return Credentials(key, from_query, cookies, view_token)


def view_requested(scope: Scope) -> bool:
    query = parse_qsl((scope.get("query_string") or b"").decode("latin-1"), keep_blank_values=True)
    return any(k == VIEW_PARAM and v not in ("", "0") for k, v in query)


def query_without_token(query_string: bytes) -> bytes:
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k not in SANBOX_PARAMS and not sanbox_token(k, v)]
    if len(kept) == len(pairs):
        return query_string
    return urlencode(kept).encode("latin-1")


def stripped(scope: Scope) -> Scope:
    """The scope the guest may see: without Sanbox's bearer key, key parameter and cookie."""
    headers: list[tuple[bytes, bytes]] = []
    for name, value in scope.get("headers") or []:
        lname = name.lower()
        if lname == b"authorization" and _sanbox_bearer(value) is not None:
            continue
        if lname == b"cookie":
            kept = [f"{n}={v}" for n, v in _cookie_pairs(value) if n != COOKIE]
            if not kept:
                continue
            value = "; ".join(kept).encode("latin-1")
        headers.append((name, value))
    query = query_without_token(scope.get("query_string") or b"")
    return {**scope, "headers": headers, "query_string": query}


def signed_fields(key_id: str, expires_text: str, mac: str) -> tuple[bool, int]:
    """Whether a signed credential's parts are well formed, and its expiry (0 if not): checked
    without raising on any text, so every refusal costs the same (the MAC is still compared)."""
    well_formed = bool(
        key_id
        and expires_text.isascii()
        and expires_text.isdigit()
        and len(expires_text) <= EXPIRY_DIGITS
        and mac
    )
    return well_formed, int(expires_text) if well_formed else 0


def mac_matches(mac: str, expected: str) -> bool:
    """A constant-time comparison that takes any text (non-ASCII included)."""
    return hmac.compare_digest(mac.encode("utf-8", "replace"), expected.encode())


class CookieSigner:
    """Signs and checks port cookies: ``KEY_ID.EXPIRES.MODE.MAC`` where the MAC (HMAC-SHA256
    under a key of the server's) covers the computer, the port, its publication (the id of
    `control.network.publication`: a port unpublished and published again is another one, which
    no cookie of the first opens), the key, the expiry and the mode (``full`` or ``view``)."""

    def __init__(self, secret: bytes, ttl: int = COOKIE_TTL) -> None:
        self._secret = secret
        self.ttl = ttl

    def _mac(
        self, computer_id: str, port: int, publication: str, key_id: str, expires: int, mode: str
    ) -> str:
        msg = f"port-cookie|{computer_id}|{port}|{publication}|{key_id}|{expires}|{mode}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def mint(
        self,
        computer_id: str,
        port: int,
        publication: str,
        key_id: str,
        mode: str = FULL,
        now: float | None = None,
        not_after: int | None = None,
    ) -> str:
        """A cookie that expires in `ttl`, or at `not_after` (Unix seconds) if that is sooner."""
        if mode not in (FULL, VIEW):
            raise ValueError(f"a port cookie opens {FULL} or {VIEW}, not {mode!r}")
        expires = int(now if now is not None else time.time()) + self.ttl
        if not_after is not None:
            expires = min(expires, not_after)
        mac = self._mac(computer_id, port, publication, key_id, expires, mode)
        return f"{key_id}.{expires}.{mode}.{mac}"

    def verify(
        self,
        value: str,
        computer_id: str,
        port: int,
        publication: str,
        now: float | None = None,
    ) -> tuple[str, str] | None:
        """The key id and mode the cookie was made for, or None if it is not valid here and now.
        The MAC is compared whatever else is wrong, so every refusal takes the same time."""
        key_id, _, rest = value.partition(".")
        expires_text, _, rest = rest.partition(".")
        mode, _, mac = rest.partition(".")
        well_formed, expires = signed_fields(key_id, expires_text, mac)
        good = mac_matches(mac, self._mac(computer_id, port, publication, key_id, expires, mode))
        if not (well_formed and good and mode in (FULL, VIEW)):
            return None
        if expires < (now if now is not None else time.time()):
            return None
        return key_id, mode

    def set_cookie_header(self, value: str, max_age: int, secure: bool) -> tuple[bytes, bytes]:
        attrs = f"{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict"
        return b"set-cookie", (attrs + ("; Secure" if secure else "")).encode("latin-1")
