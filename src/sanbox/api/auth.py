"""API keys: `Authorization: Bearer <key>` (or `?token=` on WebSockets); every key sees only its
org's computers; admin keys may create orgs and keys."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from ..control.errors import AuthError, ForbiddenError
from ..store import Database, repo
from ..store.models import ApiKey, Org


@dataclass(frozen=True)
class Principal:
    org: Org
    key: ApiKey

    @property
    def admin(self) -> bool:
        return self.key.admin


def bearer_token(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return conn.query_params.get("token") if conn.scope["type"] == "websocket" else None


def authenticate(db: Database, token: str | None) -> Principal:
    if not token:
        raise AuthError("missing API key: send `Authorization: Bearer <key>`", "unauthorized")
    with db.session() as s:
        key = repo.key_by_plaintext(s, token)
        org = repo.org_by_id(s, key.org_id) if key else None
    if key is None or org is None:
        raise AuthError("invalid API key", "unauthorized")
    return Principal(org=org, key=key)


def principal(request: Request) -> Principal:
    return authenticate(request.app.state.db, bearer_token(request))


def admin(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
    if not p.admin:
        raise ForbiddenError("this needs an admin API key", "forbidden")
    return p
