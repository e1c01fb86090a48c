"""Published ports: requests to `http://PORT-NAME.<domain>:<server port>/` (HTTP or WebSocket)
are relayed to PORT inside the computer through the agent's `tcp` stream. The org's API key is
required (Bearer header or `?token=`) unless the port was published as public. A request to a
suspended computer wakes it."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from ..control.errors import AuthError, ControlError
from ..control.guest import guest_call
from ..store import repo
from .auth import authenticate, bearer_token
from .ports import parse_port_host, relay_http, relay_websocket

log = logging.getLogger(__name__)


async def _refuse(scope: Scope, send: Send, status: int, code: str, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class PublishedPorts:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            state = scope["app"].state
            host = HTTPConnection(scope).headers.get("host", "")
            target = parse_port_host(host, state.settings.port_domain)
            if target is not None:
                try:
                    await self._relay(scope, receive, send, state, *target)
                except ControlError as exc:
                    await _refuse(scope, send, exc.status, exc.code, exc.message)
                return
        await self.app(scope, receive, send)

    async def _relay(
        self, scope: Scope, receive: Receive, send: Send, state: Any, port: int, name: str
    ) -> None:
        token = bearer_token(HTTPConnection(scope)) or HTTPConnection(scope).query_params.get(
            "token"
        )
        org = authenticate(state.db, token).org if token else None
        try:
            row = state.network.find_published(org, name, port)
        except ControlError:
            if org is None:
                raise AuthError(
                    f"port {port} of {name} is private: send the org's API key "
                    "(Authorization: Bearer, or ?token=)", "unauthorized",
                ) from None  # fmt: skip
            raise
        with state.db.session() as s:
            owner = repo.org_by_id(s, row.org_id)
        assert owner is not None
        async with guest_call(state.service, owner, row.id) as machine:
            client = await machine.client()
            stream = await client.tcp(port)
            try:
                relay = relay_websocket if scope["type"] == "websocket" else relay_http
                await relay(scope, receive, send, stream, host_header=f"127.0.0.1:{port}")
            finally:
                await stream.close()
