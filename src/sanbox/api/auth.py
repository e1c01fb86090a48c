"""API keys: `Authorization: Bearer <key>` (or `?token=` on WebSockets), resolved by the control
plane (`control.keys`) on every request: every key sees only its org's computers; admin keys
manage their org's keys, host-admin keys every org. The key that made a request is noted for the
audit record and, as the actor, on the events the request causes."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from ..control.errors import KeyRefusedError
from ..control.keys import Keys, Principal, require_admin, require_host_admin
from ..store.repo import ACTOR
from .auditing import note_actor
from .forwarded import scope_client
from .open_requests import hold

__all__ = [
    "Principal",
    "admin",
    "authenticate",
    "bearer_token",
    "client_address",
    "host_admin",
    "principal",
]


def bearer_token(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return conn.query_params.get("token") if conn.scope["type"] == "websocket" else None


def client_address(conn: HTTPConnection) -> str:
    """The client's address: the direct peer's, or, when the peer is a proxy the operator trusts
    (`SANBOX_TRUSTED_PROXIES`), the address that proxy saw (`forwarded.forwarded_for`)."""
    return scope_client(conn.scope)


def authenticate(conn: HTTPConnection) -> Principal:
    """The principal of the connection's key (AuthError, or TooManyFailuresError for an address
    past its failures), noted for the audit and the events."""
    keys: Keys = conn.app.state.keys
    try:
        p = keys.authenticate(bearer_token(conn), client_address(conn))
    except KeyRefusedError as exc:
        note_actor(conn.scope, exc.key_id, exc.key_prefix, exc.org_id)
        raise
    note_actor(conn.scope, p.key.id, p.key.prefix, p.org.id)
    ACTOR.set(p.key.prefix)
    hold(conn.scope, p.key.id, p.org.id)
    return p


async def principal(request: Request) -> Principal:
    # async: it runs in the request's own task, so the actor it sets reaches the route
    return authenticate(request)


async def admin(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
    require_admin(p)
    return p


async def host_admin(p: Principal = Depends(principal)) -> Principal:  # noqa: B008
    require_host_admin(p, "this")
    return p
