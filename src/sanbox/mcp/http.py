"""`/mcp` on the API server: MCP over streamable HTTP, behind the API's own key check.

`McpEndpoint` is an ASGI app routed at `/mcp`. Before any MCP session exists it authenticates
`Authorization: Bearer <key>` with `api.auth.authenticate` (the same check, failure count and
rate limit as every API request) and answers a refusal in the API's shape
(`{"error": {"code": "unauthorized", ...}}`, 401; 429 past too many failures). The key's id is
the MCP principal, so a session answers only the key that opened it (the SDK's session manager
compares them). Each tool call then goes through the API itself: an `AsyncSanbox` over
`httpx.ASGITransport(api)` with the caller's key and address, so it meets the same routes,
checks, errors and audit records as any other request.

A key holds at most `sessions_per_key` MCP sessions at once (`SANBOX_MCP_SESSIONS_PER_KEY`),
and an org, all its keys together, `sessions_per_org` (`SANBOX_MCP_SESSIONS_PER_ORG`: an org
may make any number of keys): a request that would open one more is answered 429
`too_many_sessions` before any session is made. With several API nodes, each holds its share
of the key's and the org's (`fleet/node_share.py`, as the request rates and open requests do),
so the fleet's nodes together hold about the bound, not the bound each. The server holds
`sessions_total` in all (the SDK's `max_sessions`, set to the same number; checked here first,
so the refusal is in the API's shape, 503 `unavailable`). A session no request has touched for
`SESSION_IDLE_TIMEOUT` seconds ends (the SDK's idle timeout), so sessions a client forgot free
their room.

The SDK's DNS-rebinding check (a Host allowlist for unauthenticated local servers) is off: a page
that rebinds a name to this server still has no key, and the server answers at whatever name it
is deployed under.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from starlette.requests import HTTPConnection, Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..api.auth import authenticate, bearer_token, client_address
from ..api.errors import error_headers, error_response
from ..api.settings import MCP_SESSIONS_PER_KEY, MCP_SESSIONS_PER_ORG
from ..control.errors import ControlError, RateLimitedError, UnavailableError
from ..fleet.node_share import NodeShare
from ..sdk import AsyncSanbox, AuthenticationError

if TYPE_CHECKING:  # the MCP library loads at the first request to /mcp (`_load`)
    from mcp.server.mcpserver import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from .tools import Clients

PATH = "/mcp"
SESSION_IDLE_TIMEOUT = 1800.0  # seconds without a request before a session ends
RETRY_AFTER = 60  # seconds a key at its session bound is told to wait
SESSIONS_TOTAL = 10_000  # MCP sessions the server holds in all (the SDK's `max_sessions`)


@dataclass(frozen=True)
class _Served:
    """What the requests to `/mcp` need of the MCP library, once it is loaded."""

    app: ASGIApp  # its streamable HTTP app
    owners: Callable[[], Iterable[Mapping[str, Any]]]  # a live session's owner each
    token: Callable[..., Any]  # its AccessToken
    user: Callable[[Any], Any]  # its AuthenticatedUser
    session_header: str


def _load(api: ASGIApp, max_sessions: int) -> tuple[StreamableHTTPSessionManager, _Served]:
    """The MCP server whose tools call `api`, and its session manager (not started yet). In a
    thread: the library's modules take ~0.5 s to load, which no server start pays any more."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
    from mcp.server.transport_security import TransportSecuritySettings

    from .tools import build_server

    server = build_server(through_api(api))
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=SESSION_IDLE_TIMEOUT,
        max_sessions=max_sessions,
    )
    manager = server.session_manager
    # the SDK's record of who opened each live session (it ends with the session)
    owners = manager._session_owners.values
    return manager, _Served(app, owners, AccessToken, AuthenticatedUser, MCP_SESSION_ID_HEADER)


async def _run(
    manager: StreamableHTTPSessionManager, ready: asyncio.Event, stop: asyncio.Event
) -> None:
    async with manager.run():
        ready.set()
        await stop.wait()


class McpEndpoint:
    """The `/mcp` route's app; `serving()` (entered from the API's lifespan) runs its sessions,
    from the first authenticated request on."""

    def __init__(
        self,
        sessions_per_key: int = MCP_SESSIONS_PER_KEY,
        sessions_per_org: int = MCP_SESSIONS_PER_ORG,
        sessions_total: int = SESSIONS_TOTAL,
        share: NodeShare | None = None,
    ) -> None:
        if min(sessions_per_key, sessions_per_org, sessions_total) < 1:
            raise ValueError("MCP sessions per key, per org and in all must be at least 1")
        self.share = share or NodeShare()  # the API nodes that share the key's and org's bounds
        self.sessions_per_key = sessions_per_key
        self.sessions_per_org = sessions_per_org
        self.sessions_total = sessions_total
        self._api: ASGIApp | None = None
        self._served: _Served | None = None
        self._starting = asyncio.Lock()
        self._stop = asyncio.Event()
        self._runner: asyncio.Future[None] | None = None
        self._opening: Counter[tuple[str, str]] = Counter()  # (key, org) -> opening one now

    def route(self) -> Route:
        return Route(PATH, endpoint=self, include_in_schema=False)

    @asynccontextmanager
    async def serving(self, api: ASGIApp) -> AsyncIterator[None]:
        """Serve MCP sessions whose tools call `api` (the app this endpoint is part of); at the
        end, end them all."""
        self._api, self._stop, self._starting = api, asyncio.Event(), asyncio.Lock()
        try:
            yield
        finally:
            self._api = None
            self._stop.set()
            async with self._starting:  # a start under way ends first
                runner, self._runner, self._served = self._runner, None, None
            if runner is not None:
                await runner

    async def _start(self) -> _Served | None:
        """The MCP app, loaded and its session manager running; None if not serving."""
        if self._served is not None:
            return self._served
        async with self._starting:
            if self._served is None and self._api is not None:
                manager, served = await asyncio.to_thread(_load, self._api, self.sessions_total)
                ready = asyncio.Event()
                runner = asyncio.ensure_future(_run(manager, ready, self._stop))
                self._runner = runner
                readied = asyncio.ensure_future(ready.wait())
                await asyncio.wait({readied, runner}, return_when=asyncio.FIRST_COMPLETED)
                if not ready.is_set():
                    readied.cancel()
                    runner.result()  # its failure
                    return None
                self._served = served
            return self._served

    def sessions(self, key_id: str | None = None, org_id: str | None = None) -> int:
        """The MCP sessions open or being opened: the key's, the org's (its keys'), or all."""

        def counted(key: object, org: object) -> bool:
            return key_id in (None, key) and org_id in (None, org)

        owners = self._served.owners() if self._served is not None else ()
        held = sum(1 for o in owners if counted(o.get("client_id"), o.get("subject")))
        return held + sum(n for (k, o), n in self._opening.items() if counted(k, o))

    def _shared(self, bound: int) -> str:
        """Said after a bound's share: '' on one API node."""
        if self.share.nodes == 1:
            return ""
        return f" on this API node (its share of {bound}{self.share.across()})"

    def _refusal(self, key_id: str, org_id: str) -> ControlError | None:
        """Why `key_id` of `org_id` may not open one more session now, if it may not."""
        per_key = self.share.of(self.sessions_per_key)
        per_org = self.share.of(self.sessions_per_org)
        if self.sessions(key_id=key_id) >= per_key:
            held = f"this API key holds {per_key} MCP sessions, the most a key may"
            held += self._shared(self.sessions_per_key)
        elif self.sessions(org_id=org_id) >= per_org:
            held = f"this org's keys hold {per_org} MCP sessions, the most an org may"
            held += self._shared(self.sessions_per_org)
        elif self.sessions() >= self.sessions_total:
            return UnavailableError(
                f"the server holds {self.sessions_total} MCP sessions, the most it may: try again "
                "later, or end one of yours (DELETE /mcp with its session id)",
                "unavailable",
            )
        else:
            return None
        return RateLimitedError(
            f"{held}: end one (DELETE /mcp with its session id) or wait for one to go idle",
            RETRY_AFTER,
            "too_many_sessions",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._api is None:
            refusal = error_response(503, "unavailable", "the MCP endpoint is not running")
            await refusal(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        try:
            principal = authenticate(conn)
        except ControlError as exc:
            refusal = error_response(exc.status, exc.code, exc.message, error_headers(exc))
            await refusal(scope, receive, send)
            return
        served = await self._start()
        if served is None:
            refusal = error_response(503, "unavailable", "the MCP endpoint is not running")
            await refusal(scope, receive, send)
            return
        app = served.app
        token = served.token(
            token=bearer_token(conn) or "",
            client_id=principal.key.id,
            scopes=[],
            subject=principal.org.id,
        )
        scope["user"] = served.user(token)
        key_id, org_id = principal.key.id, principal.org.id
        if conn.headers.get(served.session_header) is not None:
            await app(scope, receive, send)  # a session's own request: it exists, or 404
            return
        full = self._refusal(key_id, org_id)
        if full is not None:
            refusal = error_response(full.status, full.code, full.message, error_headers(full))
            await refusal(scope, receive, send)
            return
        self._opening[key_id, org_id] += 1
        opening = True

        def opened() -> None:  # once: the session is the SDK's (or none was made)
            nonlocal opening
            if opening:
                opening = False
                self._opening[key_id, org_id] -= 1
                if self._opening[key_id, org_id] <= 0:
                    del self._opening[key_id, org_id]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":  # its session, if any, is registered
                opened()
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            opened()


def through_api(api: ASGIApp) -> Clients:
    """Per tool call: a client of `api` in-process, with the key, address and base URL of the HTTP
    request that carried the call (the endpoint authenticated it; its Host is not a published
    port's, or `PublishedPorts` would have relayed it)."""

    @asynccontextmanager
    async def clients(ctx: Context[Any, Any]) -> AsyncIterator[AsyncSanbox]:
        request = ctx.request_context.request
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

        user = request.scope.get("user") if isinstance(request, Request) else None
        if not isinstance(request, Request) or not isinstance(user, AuthenticatedUser):
            raise AuthenticationError("no API key came with this call", code="unauthorized")
        peer = request.client
        transport = httpx.ASGITransport(
            app=api,
            raise_app_exceptions=False,  # a 500 answers the call as it would answer anyone
            client=(client_address(request), peer.port if peer is not None else 0),
        )
        url = str(request.base_url).rstrip("/")
        async with AsyncSanbox(url, user.access_token.token, transport=transport) as sanbox:
            yield sanbox

    return clients
