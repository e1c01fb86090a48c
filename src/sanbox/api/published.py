"""Published ports: requests to ``http://PORT-NAME.ORG.<domain>:<server port>/`` (HTTP or
WebSocket) are relayed to PORT inside the computer NAME of the org ORG through the agent's `tcp`
stream; ``PORT-NAME.<domain>`` is the short form for the default org, and only for it, so a URL
names one computer of one org whatever other orgs call theirs. A private port needs a key of that
org (or the port's cookie, see `ports.access`); nothing of the caller's credentials reaches the
guest. A request to a suspended computer wakes it."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from ..control.errors import AuthError, ControlError, ForbiddenError, NotFoundError
from ..control.keys import Keys
from ..host.secret import derived_key
from ..store.models import ComputerRow, Org
from ..store.repo import ACTOR
from .auth import client_address
from .errors import error_headers
from .ports import PortHost, parse_port_host, relay_http, relay_websocket
from .ports.access import CookieSigner, credentials, query_without_token, stripped
from .settings import DEFAULT_ORG

log = logging.getLogger(__name__)


async def _refuse(scope: Scope, send: Send, exc: ControlError) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})
        return
    body = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (error_headers(exc) or {}).items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class PublishedPorts:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._signer: CookieSigner | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            state = scope["app"].state
            host = HTTPConnection(scope).headers.get("host", "")
            target = parse_port_host(host, state.settings.port_domain)
            if target is not None:
                try:
                    await self._relay(scope, receive, send, state, target)
                except ControlError as exc:
                    await _refuse(scope, send, exc)
                return
        await self.app(scope, receive, send)

    def signer(self, state: Any) -> CookieSigner:
        if self._signer is None:
            self._signer = CookieSigner(
                derived_key(state.settings.layout.secret_key, "port-cookie")
            )
        return self._signer

    def _find(self, state: Any, target: PortHost) -> tuple[ComputerRow, Org, bool]:
        try:
            return state.computers.find_published(  # type: ignore[no-any-return]
                target.org or DEFAULT_ORG, target.name, target.port
            )
        except NotFoundError:
            if target.org is None:
                raise NotFoundError(
                    f"no published port {target.port} on a computer named {target.name!r} in "
                    f"the default org; a computer of another org is reached at "
                    f"PORT-NAME.ORG.{state.settings.port_domain}",
                    "port_not_found",
                ) from None
            raise

    def _authorize(self, state: Any, scope: Scope, row: ComputerRow, owner: Org, port: int) -> str:
        """The id of the key that may open this private port, or AuthError/ForbiddenError."""
        creds = credentials(scope)
        keys: Keys = state.keys
        if creds.key is not None:
            principal = keys.authenticate(creds.key, client_address(HTTPConnection(scope)))
            if principal.org.id != owner.id:
                raise ForbiddenError("this key belongs to another org", "forbidden")
            ACTOR.set(principal.key.prefix)  # a computer this request wakes names the key
            return principal.key.id
        if creds.cookie is not None:
            key_id = self.signer(state).verify(creds.cookie, row.id, port)
            key = keys.usable_key(key_id) if key_id else None  # not revoked, not expired
            if key is not None and key.org_id == owner.id:
                ACTOR.set(key.prefix)
                return key.id
        raise AuthError(
            f"port {port} of {row.name} is private: send a key of its org "
            "(Authorization: Bearer, or ?token= once from a browser)",
            "unauthorized",
        )

    async def _relay(
        self, scope: Scope, receive: Receive, send: Send, state: Any, target: PortHost
    ) -> None:
        row, owner, public = self._find(state, target)
        if not public:
            key_id = self._authorize(state, scope, row, owner, target.port)
            creds = credentials(scope)
            if creds.from_query and scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
                await self._send_to_cookie(scope, send, state, row.id, target.port, key_id)
                return
        async with state.computers.tcp(owner, row.id, target.port) as stream:
            relay = relay_websocket if scope["type"] == "websocket" else relay_http
            await relay(
                stripped(scope), receive, send, stream, host_header=f"127.0.0.1:{target.port}"
            )

    async def _send_to_cookie(
        self, scope: Scope, send: Send, state: Any, computer_id: str, port: int, key_id: str
    ) -> None:
        """A browser that came with ?token=: back to the same URL without it, with the cookie."""
        signer = self.signer(state)
        query = query_without_token(scope.get("query_string") or b"")
        location = (scope.get("raw_path") or scope["path"].encode()) + (
            b"?" + query if query else b""
        )
        secure = scope.get("scheme") == "https"
        headers = [
            (b"location", location),
            signer.set_cookie_header(signer.mint(computer_id, port, key_id), secure),
            (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
