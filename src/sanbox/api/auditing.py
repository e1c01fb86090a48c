"""The audit trail: an ASGI middleware that writes one record (`control.audit`) for every request
under /v1 that means to change something, failed ones included (a wrong key, a refused address, a
404, a body over the limit): any method but GET, HEAD and OPTIONS, and every WebSocket session
(a WebSocket runs commands). The record is written once the outcome is known, before the last of
the response reaches the client, so a client that reads the audit next finds it.

Recorded: the actor (the key that authenticated, or the known key that was refused; noted by
`auth` through `note_actor`), the action (method and route template:
`POST /v1/computers/{ref}/stop`; `WEBSOCKET ...` for a WebSocket), the target (the path's
parameters), the status (101 for an accepted WebSocket, 403 for one closed before that) and the
error code (from the error body, or a WebSocket's error message), the client's address. Never a
body, a query string (where a browser's `?token=` would be) or anything shaped like a key.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..control.audit import AuditEntry, AuditLog
from .forwarded import UNKNOWN, scope_client
from .redact import redact

log = logging.getLogger(__name__)

READS = frozenset({"GET", "HEAD", "OPTIONS"})
ACTOR = "sanbox.actor"  # where `note_actor` leaves the key in the request's state
MAX_ERROR_BODY = 4096  # bytes of an error body read for its code
_WS_ERROR = '{"type": "error"'


@dataclass(frozen=True)
class Actor:
    key_id: str
    key_prefix: str
    org_id: str


def note_actor(scope: Scope, key_id: str, key_prefix: str, org_id: str) -> None:
    scope.setdefault("state", {})[ACTOR] = Actor(key_id, key_prefix, org_id)


def audited(scope: Scope) -> bool:
    path: str = scope.get("path", "")
    ours = path in ("/v1", "/e2b") or path[:4] == "/v1/" or path[:5] == "/e2b/"  # E2B's API
    if scope["type"] not in ("http", "websocket"):
        return False
    if not (ours or path[:9] == "/console/"):  # the console's too
        return False
    return scope["type"] == "websocket" or scope["method"] not in READS


def action(scope: Scope) -> str:
    """The method and the route's template, or the path (keys blanked) if no route matched."""
    method = "WEBSOCKET" if scope["type"] == "websocket" else scope["method"]
    template = getattr(scope.get("route"), "path", None)
    return f"{method} {template if isinstance(template, str) else redact(scope['path'])}"[:200]


def target(scope: Scope) -> dict[str, str]:
    params: dict[str, Any] = scope.get("path_params") or {}
    return {str(k)[:64]: redact(str(v))[:200] for k, v in params.items()}


def error_code(body: bytes) -> str | None:
    """The `code` of an API error body (`{"error": {"code": ...}}`), if it is one."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code[:64] if isinstance(code, str) else None


def _ws_error_code(message: Message) -> str | None:
    text = message.get("text")
    if isinstance(text, str) and text.startswith(_WS_ERROR):
        try:
            code = json.loads(text).get("code")
        except ValueError:
            return None
        return code[:64] if isinstance(code, str) else None
    return None


@dataclass
class _Outcome:
    at: datetime
    status: int | None = None
    code: str | None = None
    body: bytearray = field(default_factory=bytearray)
    written: bool = False


class AuditTrail:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not audited(scope):
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})
        outcome = _Outcome(datetime.now(UTC))

        async def watch(message: Message) -> None:
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                outcome.status = int(message["status"])
            elif kind == "http.response.body":
                if (outcome.status or 0) >= 400 and len(outcome.body) < MAX_ERROR_BODY:
                    outcome.body += message.get("body", b"")[:MAX_ERROR_BODY]
                if not message.get("more_body", False):
                    outcome.code = error_code(bytes(outcome.body)) if outcome.body else None
                    self._write(scope, outcome)
            elif kind == "websocket.accept":
                outcome.status = 101
            elif kind == "websocket.close" and outcome.status is None:
                outcome.status = 403
            elif kind == "websocket.send" and outcome.code is None:
                outcome.code = _ws_error_code(message)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except asyncio.CancelledError:
            self._write(scope, outcome, (499, "client_closed_request"))
            raise
        except Exception:
            self._write(scope, outcome, (500, "internal"))
            raise
        self._write(scope, outcome, (500, "internal"))

    def _write(
        self, scope: Scope, outcome: _Outcome, otherwise: tuple[int, str] | None = None
    ) -> None:
        """Write the record once; `otherwise` is the outcome if no response said one."""
        if outcome.written:
            return
        outcome.written = True
        status, code = outcome.status, outcome.code
        if status is None and otherwise is not None:
            status, code = otherwise
        actor: Actor | None = scope["state"].get(ACTOR)
        client = scope_client(scope)
        entry = AuditEntry(
            action=action(scope),
            status=status or 0,
            target=target(scope),
            code=code,
            client=client[:64] if client != UNKNOWN else None,
            at=outcome.at,
            key_id=actor.key_id if actor else None,
            key_prefix=actor.key_prefix if actor else None,
            org_id=actor.org_id if actor else None,
        )
        try:
            audit: AuditLog = scope["app"].state.audit
            audit.record(entry)
        except Exception:
            log.exception("could not write the audit record of %s", entry.action)
