"""Published ports: requests to ``http://PORT-NAME.ORG.<domain>:<server port>/`` (HTTP or
WebSocket) are relayed to PORT inside the computer NAME of the org ORG through the agent's `tcp`
stream; ``PORT-NAME.<domain>`` is the short form for the default org, and only for it, so a URL
names one computer of one org whatever other orgs call theirs. A private port needs a key of that
org (or the port's cookie, see `ports.access`); nothing of the caller's credentials reaches the
guest, and a page load with a key in its URL is moved to the URL without it first, public port or
private (`ports.send_back`). A request to a suspended computer wakes it.

A visitor who may not open a port (no key, a key of another org, no valid cookie) gets one answer
whether the port is private or does not exist: 404 `port_not_found` with the same message, after
the same lookups, so URLs cannot be enumerated; a key of the URL's own org gets the precise
answer. A wrong key is refused (401) before anything is looked up, the same for every URL.
Cookie-authenticated requests come from a browser: the port's own page or a page load
(`ports.origin`: `Origin`, `Sec-Fetch-Site`), and a cookie minted view-only
(`?token=KEY&sanbox_view=1`, or a view link's `?sanbox_view_token=`, `ports.view_link`) opens
only safe methods and WebSockets whose client input is dropped (`ports.rfb`). A view link
that is not valid for this URL, here and now, is no credential: the visitor gets the keyless
answer."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..control.errors import AuthError, ControlError, ForbiddenError, NotFoundError
from ..control.keys import Keys, Principal
from ..control.network import publication
from ..host.keys.secret import derived_key
from ..store.models import ComputerRow, Org
from ..store.repo import ACTOR
from .auth import client_address
from .errors import error_headers
from .forwarded import forwarded_proto
from .open_requests import OpenCounts, holding
from .ports import ByteStream, PortHost, parse_port_host, relay_port_http, relay_websocket
from .ports.access import (
    FULL,
    SAFE_METHODS,
    VIEW,
    CookieSigner,
    credentials,
    stripped,
    view_requested,
)
from .ports.origin import check_origin
from .ports.public_relays import PublicRelays
from .ports.relay import send_error
from .ports.rfb import RfbViewOnly
from .ports.send_back import send_back
from .ports.view_link import NOWHERE, LinkTarget, ViewLinkSigner
from .ports.view_link import PURPOSE as VIEW_LINK_PURPOSE
from .settings import DEFAULT_ORG
from .standing import (
    KEY_LAPSED,
    Check,
    Lapsed,
    Standing,
    key_id_stands,
    token_stands,
    while_standing,
)

log = logging.getLogger(__name__)
PORT_CHANGED = "this port was unpublished or made private since the connection opened: it ends"


async def _refuse(scope: Scope, send: Send, exc: ControlError) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})
        return
    body = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (error_headers(exc) or {}).items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def hidden(target: PortHost) -> NotFoundError:
    """What a visitor who may not open a port hears, whether it is private or does not exist."""
    org = f" in org {target.org!r}" if target.org else ""
    return NotFoundError(
        f"nothing is published at port {target.port} of {target.name!r}{org} that this request "
        "may open: a private port needs a key of its org (Authorization: Bearer, or ?token= "
        "once from a browser)",
        "port_not_found",
    )


def view_link_signer(secret_key: Path) -> ViewLinkSigner:
    """The signer of view links, under the host's key for that purpose (`host.secret`)."""
    return ViewLinkSigner(derived_key(secret_key, VIEW_LINK_PURPOSE))


def _page_load(scope: Scope) -> bool:
    """A browser's navigation: where a credential in the URL is traded for the port cookie."""
    return scope["type"] == "http" and scope["method"] in ("GET", "HEAD")


class PublishedPorts:
    """Served before `OpenRequests` (`api/app.py`), so a relay takes its own place, for as long
    as it runs: one opened by a key or its cookie among that key's and org's open requests (the
    API's `open_requests`, shared), one to a public port among the computer's (`public`)."""

    def __init__(
        self,
        app: ASGIApp,
        open_requests: OpenCounts | None = None,
        public: PublicRelays | None = None,
    ) -> None:
        self.app = app
        self.open_requests = open_requests if open_requests is not None else OpenCounts()
        self.public = public if public is not None else PublicRelays()
        self._signer: CookieSigner | None = None
        self._links: ViewLinkSigner | None = None

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

    def link_signer(self, state: Any) -> ViewLinkSigner:
        if self._links is None:
            self._links = view_link_signer(state.settings.layout.secret_key)
        return self._links

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

    def _cookie_key(
        self, state: Any, cookies: tuple[str, ...], row: ComputerRow | None, port: int
    ) -> tuple[str, str, str] | None:
        """The key id and mode of the first valid port cookie of this computer and port, and the
        cookie, if its key still opens anything. A page may have set another of the name on the
        whole domain (a script can; a guest's Set-Cookie cannot, see `relay.guest_cookies`):
        each is checked, not only the first. The MAC is checked whether or not the port exists
        (against no computer then), so a visitor cannot time the difference."""
        signer = self.signer(state)
        computer_id, pub = (row.id, publication(row, port)) if row is not None else ("", "")
        verified = next(
            (
                (*v, c)
                for c in cookies
                if (v := signer.verify(c, computer_id, port, pub)) is not None
            ),
            None,
        )
        if verified is None or row is None:
            return None
        key_id, mode, value = verified
        keys: Keys = state.keys
        key = keys.usable_key(key_id)  # not revoked, not expired, within its rate
        if key is None or key.org_id != row.org_id:
            return None
        ACTOR.set(key.prefix)  # a computer this request wakes names the key
        return key.id, mode, value

    def _cookie_stands(
        self, state: Any, cookie: tuple[str, str, str], row: ComputerRow, port: int
    ) -> Check:
        """A cookie's connection lasts while the cookie is valid (its own end: a view link's
        is the link's) and its key stands."""
        key_stands = key_id_stands(state.keys, cookie[0])
        signer, value, pub = self.signer(state), cookie[2], publication(row, port)
        return lambda: signer.verify(value, row.id, port, pub) is not None and key_stands()

    def _published(
        self, state: Any, target: PortHost, row: ComputerRow, public: bool = False
    ) -> tuple[Check, ControlError]:
        """The check that the port is published still as it was when a connection opened: the
        same publication of the same computer, and public if it was opened as public (a
        connection a key or its cookie opened may go on when its port is made public: the key
        opens it either way); with what a connection is told once it is not."""
        computer_id, opened = row.id, publication(row, target.port)

        def check() -> bool:
            try:
                now, _, now_public = self._find(state, target)
            except NotFoundError:
                return False
            same = now.id == computer_id and publication(now, target.port) == opened
            return same and (now_public or not public)

        return check, NotFoundError(PORT_CHANGED, "port_not_found")

    def _link_key(
        self, state: Any, token: str | None, row: ComputerRow | None, port: int
    ) -> tuple[str, int] | None:
        """The key id and expiry of a valid view link of this computer and port, if the key that
        made it still opens anything. Checked like a cookie: the MAC whether or not the port
        exists."""
        if token is None:
            return None
        target = NOWHERE
        if row is not None:
            target = LinkTarget(row.id, row.org_id, port, publication(row, port))
        verified = self.link_signer(state).verify(token, target)
        if verified is None or row is None:
            return None
        key_id, expires = verified
        keys: Keys = state.keys
        key = keys.usable_key(key_id)
        if key is None or key.org_id != row.org_id:
            return None
        ACTOR.set(key.prefix)
        return key.id, expires

    async def _relay(
        self, scope: Scope, receive: Receive, send: Send, state: Any, target: PortHost
    ) -> None:
        creds = credentials(scope)
        principal: Principal | None = None
        if creds.key is not None:  # refused the same whatever the URL, before any lookup
            keys: Keys = state.keys
            principal = keys.authenticate(creds.key, client_address(HTTPConnection(scope)))
        missing: NotFoundError | None = None
        try:
            found: tuple[ComputerRow, Org, bool] | None = self._find(state, target)
        except NotFoundError as exc:
            found, missing = None, exc
        cookie = self._cookie_key(state, creds.cookies, found[0] if found else None, target.port)
        link = self._link_key(state, creds.view_token, found[0] if found else None, target.port)
        own = principal is not None and principal.org.name == (target.org or DEFAULT_ORG)
        if found is None:
            raise missing if own and missing is not None else hidden(target)
        row, owner, public = found
        if public:
            if creds.from_query and _page_load(scope):  # no cookie needed: only the key goes
                await send_back(scope, send)
                return
            stands = Standing(self._published(state, target, row, public=True))
            with self.public.holding(row.id):
                await self._open(scope, receive, send, state, owner, row, target.port, stands)
            return
        keys = state.keys
        if principal is not None and own:
            ACTOR.set(principal.key.prefix)  # a computer this request wakes names the key
            if creds.from_query and _page_load(scope):
                mode = VIEW if view_requested(scope) else FULL
                await self._send_to_cookie(
                    scope, send, state, row, target.port, principal.key.id, mode
                )
                return
            stands = Standing(
                self._published(state, target, row),
                (token_stands(keys, creds.key), AuthError(KEY_LAPSED)),
            )
            with holding(self.open_requests, principal.key.id, principal.org.id):
                await self._open(scope, receive, send, state, owner, row, target.port, stands)
            return
        if principal is None and link is not None and _page_load(scope):
            key_id, expires = link  # a view link: traded for a view-only cookie, never longer
            await self._send_to_cookie(
                scope, send, state, row, target.port, key_id, VIEW, not_after=expires
            )
            return
        if principal is None and cookie is not None:
            check_origin(scope, forwarded_proto(scope))  # a browser's: from the port's own page
            view_only = cookie[1] == VIEW
            if view_only and scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
                raise ForbiddenError("this port was opened view-only", "view_only")
            stands = Standing(
                self._published(state, target, row),
                (self._cookie_stands(state, cookie, row, target.port), AuthError(KEY_LAPSED)),
            )
            with holding(self.open_requests, cookie[0], row.org_id):
                await self._open(
                    scope, receive, send, state, owner, row, target.port, stands, view_only
                )
            return
        raise hidden(target)

    async def _open(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        state: Any,
        owner: Org,
        row: ComputerRow,
        port: int,
        stands: Standing,
        view_only: bool = False,
    ) -> None:
        """Relay to the port; a WebSocket or an HTTP exchange lasts while what let it in stands
        (`stands`: its publication, and the key or cookie that opened it; a VNC, a terminal, an
        event stream or a long download left open would outlive its key's revocation, or its
        port's unpublishing)."""
        host_header = f"127.0.0.1:{port}"
        async with state.computers.tcp(owner, row.id, port) as stream:
            if scope["type"] == "websocket":
                client_filter = RfbViewOnly() if view_only else None
                relay = relay_websocket(
                    stripped(scope),
                    receive,
                    send,
                    stream,
                    host_header=host_header,
                    client_filter=client_filter,
                )
                if not await while_standing(stands, relay):
                    why = stands.lapsed.message if stands.lapsed else KEY_LAPSED
                    await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
            else:
                await _http_while_standing(
                    stands, scope, receive, send, stream, host_header, row.id
                )

    async def _send_to_cookie(
        self,
        scope: Scope,
        send: Send,
        state: Any,
        row: ComputerRow,
        port: int,
        key_id: str,
        mode: str,
        not_after: int | None = None,
    ) -> None:
        """A browser that came with ?token=: a page that moves to the same URL without it, with
        the cookie (a meta refresh, so the Strict cookie goes along: see `ports.access`)."""
        signer = self.signer(state)
        secure = forwarded_proto(scope) == "https"
        now = int(time.time())
        pub = publication(row, port)
        value = signer.mint(row.id, port, pub, key_id, mode, now=now, not_after=not_after)
        max_age = signer.ttl if not_after is None else max(0, min(signer.ttl, not_after - now))
        await send_back(scope, send, signer.set_cookie_header(value, max_age, secure))


async def _http_while_standing(
    stands: Standing,
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: ByteStream,
    host_header: str,
    computer: str,
) -> None:
    """`relay_port_http` (`ports.devtools`: a DevTools discovery answer checked) until it ends or
    what let it in lapses: a lapse before the response's head is answered with the lapse's error
    (401 for a key); after it, `Lapsed` is raised (the server aborts the connection, as a
    broken-off one)."""
    started = False

    async def watched(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    relay = relay_port_http(
        stripped(scope), receive, watched, stream, host_header=host_header, computer=computer
    )
    if await while_standing(stands, relay):
        return
    lapse = stands.lapsed or AuthError(KEY_LAPSED)
    if started:
        raise Lapsed(lapse.message)
    await send_error(send, lapse.status, lapse.code, lapse.message)
