"""Where E2B's SDK reaches a sandbox: the envd of each computer and `get_host()` URLs.

Routing, the first that matches:
- `Host: {port}-{sandboxID}.{domain}` (the SDK's URL over HTTPS, wildcard DNS and certificate):
  envd for port 49983, any other port of the computer otherwise;
- a path under `/e2b-envd/` (the SDK's single-URL setting, `E2B_SANDBOX_URL=…/e2b-envd`): envd
  of the sandbox named by the `E2b-Sandbox-Id` header.

envd calls need the sandbox's access token (`X-Access-Token`); a sandbox that is not there or
does not run answers 502, as E2B's proxy does. Another port is open to anyone who has its URL,
as in E2B, unless the sandbox was made with `allowPublicTraffic=false` (or not through E2B's API
at all): then it needs the `e2b-traffic-access-token` header, which the port is not sent
(`for_guest`: nor Sanbox's key or cookie). A port nothing listens on
answers 502 with E2B's proxy's words ("The sandbox is running but port is not open"), a
WebSocket request too, before its upgrade, as every refusal of a port (where the server can
answer a WebSocket request in HTTP: `websocket.http.response`). This
middleware sits outside the published-port relay, so a host of this shape is never taken for a
published port.

Served before `OpenRequests`, the gateway holds its requests' places itself, in the API's counts
(`api/open_requests.py`): an envd call, once its token is checked, and a port's connection with
the traffic token, as their sandbox's and its org's sandboxes' (`sandbox_holder`: apart from its
API keys'), for their whole life (a
stream, a download, a relayed WebSocket); a connection to a public port as one of its computer's
public relays (`PublicRelays`, shared with the published ports). Every one but a public port's
(anyone's: a visitor would spend the org's API requests) takes a request of its org's rate
first. Past a bound: 429, `resource_exhausted` for a Connect call, `{"code": 429, "message"}`
otherwise, with `Retry-After`."""

from __future__ import annotations

import functools
import hmac
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..api.errors import error_headers
from ..api.open_requests import OpenCounts, hold, holding, sandbox_holder, serving
from ..api.ports import relay_port_http, relay_websocket
from ..api.ports.access import stripped
from ..api.ports.public_relays import PublicRelays
from ..control.errors import ControlError
from . import connect, envd_files, envd_http, envd_process, envd_watch
from .envd import Envd, SandboxGoneError, basic_user
from .errors import connect_error
from .identity import ENVD_PORT, PUBLIC_TRAFFIC, Tokens, computer_id, signature_valid

PREFIX = "/e2b-envd"
PORT_NOT_OPEN = "The sandbox is running but port is not open"  # E2B's proxy's words
PORT_CLOSED = {"connection_refused", "connect_timeout", "connect_failed"}  # the guest's dial
_HOST = re.compile(r"([1-9][0-9]{0,4})-(cmp-[a-z0-9]{12})")


def envd_of(state: Any) -> Envd:
    found: Envd | None = getattr(state, "e2b_envd", None)
    if found is None:
        tokens = getattr(state, "e2b_tokens", None) or Tokens(state.settings.layout.secret_key)
        state.e2b_tokens = tokens
        found = Envd(state.computers, tokens, state.settings.e2b_create_user, state.keys.take_org)
        state.e2b_envd = found
    return found


async def close(state: Any) -> None:
    found: Envd | None = getattr(state, "e2b_envd", None)
    if found is not None:
        await found.processes.close()


def gone(sandbox: str) -> str:
    """E2B's proxy's words for a sandbox that does not run: the SDK looks for "was not found"."""
    return (
        f"The sandbox {sandbox[:40]!r} was not found: it is not running (killed, expired or paused)"
    )


def port_closed(sandbox: str, port: int) -> JSONResponse:
    """E2B's proxy's answer for a port nothing listens on (`NewPortClosedError`, to a client
    that is not a browser): 502, so a program polling for its server waits on while it says so."""
    body = {"sandboxId": sandbox[:40], "message": PORT_NOT_OPEN, "port": port, "code": 502}
    return JSONResponse(body, status_code=502, media_type="application/json; charset=utf-8")


def is_api_host(host: str, domain: str) -> bool:
    name = host.strip().lower().rpartition(":")[0] if ":" in host else host.strip().lower()
    return name == "api." + domain.strip(".").lower().partition(":")[0]


def parse_host(host: str, domain: str) -> tuple[int, str] | None:
    """`49983-cmp-ab12….example.com[:443]` -> (49983, "cmp-ab12…") under `domain`."""
    host = host.strip().lower().rpartition(":")[0] if ":" in host else host.strip().lower()
    suffix = "." + domain.strip(".").lower().partition(":")[0]
    if not host.endswith(suffix):
        return None
    match = _HOST.fullmatch(host[: -len(suffix)])
    if match is None or int(match[1]) > 65535:
        return None
    return int(match[1]), match[2]


def signed(envd: Envd, sandbox: str, request: Request) -> str | None:
    """The sandbox's token, standing in for the header, if the URL's signature is valid. It
    signs the path, the operation and `username` ("" for the default user): the request then
    acts as that user only."""
    computer = computer_id(sandbox)
    if computer is None:
        return None
    q = request.query_params
    token = envd.tokens.envd(computer)
    operation = "read" if request.method == "GET" else "write"
    ok = signature_valid(
        token,
        q.get("path", ""),
        operation,
        q.get("username", ""),
        q["signature"],
        q.get("signature_expiration"),
    )
    return token if ok else None


TRAFFIC_TOKEN = b"e2b-traffic-access-token"


def for_guest(scope: Scope) -> Scope:
    """What a sandbox's port is sent of a request: `stripped` of Sanbox's credentials, and of
    the traffic token that opened it (a caller's credential: nothing of one crosses into a
    guest)."""
    kept = stripped(scope)
    headers = [(k, v) for k, v in kept.get("headers") or [] if k.lower() != TRAFFIC_TOKEN]
    return {**kept, "headers": headers}


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


class E2bGateway:
    def __init__(
        self,
        app: ASGIApp,
        open_requests: OpenCounts | None = None,
        public: PublicRelays | None = None,
    ) -> None:
        self.app = app
        self.open_requests = open_requests if open_requests is not None else OpenCounts()
        self.public = public if public is not None else PublicRelays()
        self._watchers = envd_watch.Watchers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        settings = state.settings
        path: str = scope.get("path", "")
        domain = settings.e2b_domain or settings.port_domain
        host = _header(scope, b"host") or ""
        target = parse_host(host, domain)
        if is_api_host(host, domain):  # https://api.{domain}: E2B's API, as the SDK calls it
            scope = {**scope, "path": "/e2b" + path, "raw_path": ("/e2b" + path).encode()}
            await self.app(scope, receive, send)
        elif target is not None:
            port, sandbox = target
            if port != ENVD_PORT:
                await self._port(scope, receive, send, state, sandbox, port)
                return
            await self._envd(scope, receive, send, state, sandbox, path)
        elif path == PREFIX or path.startswith(PREFIX + "/"):
            sandbox = _header(scope, b"e2b-sandbox-id") or ""
            await self._envd(scope, receive, send, state, sandbox, path[len(PREFIX) :] or "/")
        else:
            await self.app(scope, receive, send)

    async def _envd(
        self, scope: Scope, receive: Receive, send: Send, state: Any, sandbox: str, path: str
    ) -> None:
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        with serving(self.open_requests, scope):  # the place `_answer` holds, to the end
            request = Request(scope, receive)
            response = await self._answer(request, envd_of(state), sandbox, path)
            await response(scope, receive, send)

    async def _answer(self, request: Request, envd: Envd, sandbox: str, path: str) -> Response:
        token = request.headers.get("x-access-token")
        user = request.query_params.get("username") or None
        by_signature = token is None and path == "/files" and "signature" in request.query_params
        if by_signature:
            token = signed(envd, sandbox, request)
        try:
            if not by_signature:  # a signed URL is for the user it signs (none: the default
                # user), as envd's: a Basic header beside it would make it anyone's (root's)
                user = user or basic_user(request.headers.get("authorization"))
            row, org = envd.computer(sandbox, token)
            hold(request.scope, *sandbox_holder(row.id, org.id))
            if path == "/health":
                return Response(status_code=204)
            sb = await envd.sandbox(row, org, user)
            if path == "/files" and request.method == "GET":
                return await envd_http.download(sb, request)
            if path == "/files" and request.method == "POST":
                return await envd_http.upload(sb, request)
            service, _, method = path.strip("/").partition("/")
            if request.method != "POST":
                return envd_http.error(404, f"no {request.method} {path[:100]} here")
            return await self._rpc(request, envd, sb, service, method)
        except SandboxGoneError:
            return envd_http.error(502, gone(sandbox))
        except connect.ConnectError as exc:
            if path == "/files":
                return envd_http.error(exc.status, exc.message)
            return JSONResponse(exc.body(), status_code=exc.status)
        except ControlError as exc:
            answer = envd_http.control_error(exc)
            if path != "/files":
                error = connect_error(exc)
                answer = JSONResponse(error.body(), error.status)
            answer.headers.update(error_headers(exc) or {})  # Retry-After for a 429
            return answer

    async def _rpc(
        self, request: Request, envd: Envd, sb: Any, service: str, method: str
    ) -> Response:
        kind = request.headers.get("content-type", "")
        if (service, method) == ("process.Process", "StreamInput"):
            return await _client_stream(envd_process.stream_input(envd, sb, _envelopes(request)))
        if kind.split(";")[0].strip().lower() == connect.STREAM_TYPE:
            msg = await _first_envelope(request)
        else:
            msg = connect.first_message(await _bounded_body(request), kind)
        unary: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {}
        stream: dict[str, Callable[..., AsyncIterator[dict[str, Any]]]] = {}
        if service == "process.Process":
            unary = {k: functools.partial(f, envd) for k, f in envd_process.UNARY.items()}
            stream = {k: functools.partial(f, envd) for k, f in envd_process.STREAMS.items()}
            timeout_ms = request.headers.get("connect-timeout-ms")  # Start's: the process's
            stream["Start"] = functools.partial(envd_process.start, envd, timeout_ms=timeout_ms)
        elif service == "filesystem.Filesystem":
            unary = {
                "Stat": envd_files.stat,
                "ListDir": envd_files.list_dir,
                "MakeDir": envd_files.make_dir,
                "Move": envd_files.move,
                "Remove": envd_files.remove,
                "CreateWatcher": self._watchers.create,
                "GetWatcherEvents": self._watchers.events,
                "RemoveWatcher": self._watchers.remove,
            }
            stream = {"WatchDir": self._watchers.stream}
        if method in unary:
            return JSONResponse(await unary[method](sb, msg))
        if method in stream:
            return StreamingResponse(
                _framed(stream[method](sb, msg)), media_type=connect.STREAM_TYPE
            )
        raise connect.ConnectError("unimplemented", f"{service}/{method} is not served")

    async def _port(
        self, scope: Scope, receive: Receive, send: Send, state: Any, sandbox: str, port: int
    ) -> None:
        envd = envd_of(state)
        relayed = False  # a message went to the client: too late for an HTTP answer

        async def sending(message: Any) -> None:
            nonlocal relayed
            relayed = True
            await send(message)

        try:
            computer = computer_id(sandbox)
            if computer is None:
                raise SandboxGoneError(sandbox)
            row, org = envd.running(computer)
            token = _header(scope, TRAFFIC_TOKEN) or ""
            public = row.labels.get(PUBLIC_TRAFFIC) == "true"  # made by E2B's API, open
            if not public and not hmac.compare_digest(envd.tokens.traffic(computer), token):
                raise connect.ConnectError("permission_denied", "this port needs the traffic token")
            if public:  # anyone's: bounded by its computer's relays, never the org's rate
                place = self.public.holding(computer)  # (a visitor would spend its API's)
            else:
                envd.take(org.id)  # the traffic token's request, of its org's rate
                place = holding(self.open_requests, *sandbox_holder(computer, org.id))
            with place:
                async with envd.plane.tcp(org, computer, port) as tcp:
                    host_header = f"127.0.0.1:{port}"
                    if scope["type"] == "websocket":
                        await relay_websocket(
                            for_guest(scope), receive, sending, tcp, host_header=host_header
                        )
                    else:
                        await relay_port_http(
                            for_guest(scope),
                            receive,
                            sending,
                            tcp,
                            host_header=host_header,
                            computer=computer,
                        )
        except (SandboxGoneError, connect.ConnectError, ControlError) as exc:
            closed = isinstance(exc, ControlError) and exc.code in PORT_CLOSED
            status = 502 if isinstance(exc, SandboxGoneError) else getattr(exc, "status", 502)
            message = gone(sandbox) if status == 502 else getattr(exc, "message", "refused")
            message = PORT_NOT_OPEN if closed else message
            if relayed:  # (an answer or an upgrade under way: its relay ends it)
                return
            refusal = (
                port_closed(sandbox, port) if closed else envd_http.error(status, str(message))
            )
            if isinstance(exc, ControlError) and not closed:
                refusal.headers.update(error_headers(exc) or {})
            if scope["type"] == "websocket" and not _can_deny(scope):
                await send({"type": "websocket.close", "code": 1008, "reason": str(message)[:120]})
                return
            await refusal(scope, receive, send)  # a WebSocket's before its upgrade, as E2B's


def _can_deny(scope: Scope) -> bool:
    """Whether the server can answer a WebSocket request with an HTTP response before its
    upgrade (ASGI's `websocket.http.response`: uvicorn's, Starlette's test client); without it a
    refusal is a close before accept, which servers answer 403."""
    return "websocket.http.response" in (scope.get("extensions") or {})


async def _bounded_body(request: Request) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > connect.MAX_MESSAGE + 5:
            raise connect.ConnectError("resource_exhausted", "the request is too big")
    return bytes(body)


async def _first_envelope(request: Request) -> dict[str, Any]:
    """A server stream's request message: its first envelope, without waiting for the end of the
    body (some clients end it only once the response has begun)."""
    reader = connect.EnvelopeReader()
    async for chunk in request.stream():
        for envelope in reader.feed(chunk):
            return envelope.message
    raise connect.ConnectError("invalid_argument", "a server stream's request is one envelope")


async def _envelopes(request: Request) -> AsyncIterator[dict[str, Any]]:
    """A client stream's messages as they arrive: one chunk of the body read at a time, and a
    message of `connect.MAX_MESSAGE` bytes at most held."""
    reader = connect.EnvelopeReader()
    async for chunk in request.stream():
        for envelope in reader.feed(chunk):
            if envelope.end:
                return
            yield envelope.message
    if reader.pending:
        raise connect.ConnectError("invalid_argument", "the stream ended inside a message")


async def _client_stream(handled: Awaitable[dict[str, Any]]) -> Response:
    """A client stream's answer once its handler is done: its message and the end of the stream,
    or the end with its error (at once, without reading the rest of the request)."""
    try:
        body = connect.envelope(await handled) + connect.end_stream()
    except connect.ConnectError as exc:
        body = connect.end_stream(exc)
    except ControlError as exc:
        body = connect.end_stream(connect_error(exc))
    except ClientDisconnect:  # the client went away: nobody to answer
        body = connect.end_stream(connect.ConnectError("canceled", "the client went away"))
    return Response(body, media_type=connect.STREAM_TYPE)


async def _framed(messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for message in messages:
            yield connect.envelope(message)
        yield connect.end_stream()
    except connect.ConnectError as exc:
        yield connect.end_stream(exc)
    except ControlError as exc:
        yield connect.end_stream(connect_error(exc))
