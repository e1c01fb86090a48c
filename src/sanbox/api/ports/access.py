"""Who may open a published port, and what of their credentials the guest never sees.

A caller proves access to a private port with an API key (``Authorization: Bearer sbk_…``, or
``?token=`` once, from a browser) or with the port's cookie: a browser that comes with
``?token=`` is sent back to the same URL without it, holding a short-lived cookie signed by the
server for this computer and port only (host-only, HttpOnly). Before anything is relayed, the
request loses every credential of Sanbox's: a Sanbox bearer key, the ``token`` query parameter
and the port cookie. Other ``Authorization`` headers and cookies are the guest's own and pass.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from starlette.types import Scope

COOKIE = "sanbox_port"
TOKEN_PARAM = "token"
KEY_PREFIX = "sbk_"
COOKIE_TTL = 3600  # seconds


@dataclass(frozen=True)
class Credentials:
    key: str | None  # a Sanbox API key, from the Authorization header or ?token=
    from_query: bool  # the key came in the URL (a browser to send back without it)
    cookie: str | None  # the port cookie's value


def _header_values(scope: Scope, name: bytes) -> list[bytes]:
    return [v for k, v in scope.get("headers") or [] if k.lower() == name]


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
        key = next((v for k, v in query if k == TOKEN_PARAM and v), None)
        from_query = key is not None
    cookie = next(
        (val for v in _header_values(scope, b"cookie") for n, val in _cookie_pairs(v)
         if n == COOKIE),
        None,
    )  # fmt: skip
    return Credentials(key, from_query, cookie)


def query_without_token(query_string: bytes) -> bytes:
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k != TOKEN_PARAM]
    if len(kept) == len(pairs):
        return query_string
    return urlencode(kept).encode("latin-1")


def stripped(scope: Scope) -> Scope:
    """The scope the guest may see: without Sanbox's bearer key, token parameter and cookie."""
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


class CookieSigner:
    """Signs and checks port cookies: ``KEY_ID.EXPIRES.MAC`` where the MAC (HMAC-SHA256 under a
    key of the server's) covers the computer, the port, the key and the expiry."""

    def __init__(self, secret: bytes, ttl: int = COOKIE_TTL) -> None:
        self._secret = secret
        self.ttl = ttl

    def _mac(self, computer_id: str, port: int, key_id: str, expires: int) -> str:
        msg = f"{computer_id}|{port}|{key_id}|{expires}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def mint(self, computer_id: str, port: int, key_id: str, now: float | None = None) -> str:
        expires = int(now if now is not None else time.time()) + self.ttl
        return f"{key_id}.{expires}.{self._mac(computer_id, port, key_id, expires)}"

    def verify(
        self, value: str, computer_id: str, port: int, now: float | None = None
    ) -> str | None:
        """The key id the cookie was made for, or None if it is not valid here and now."""
        key_id, _, rest = value.partition(".")
        expires_text, _, mac = rest.partition(".")
        if not (key_id and expires_text.isascii() and expires_text.isdigit() and mac):
            return None
        expires = int(expires_text)
        if expires < (now if now is not None else time.time()):
            return None
        if not hmac.compare_digest(mac, self._mac(computer_id, port, key_id, expires)):
            return None
        return key_id

    def set_cookie_header(self, value: str, secure: bool) -> tuple[bytes, bytes]:
        attrs = f"{COOKIE}={value}; Path=/; Max-Age={self.ttl}; HttpOnly; SameSite=Lax"
        return b"set-cookie", (attrs + ("; Secure" if secure else "")).encode("latin-1")
