"""The API calls of the commands `sanbox` runs without typer (sanbox.cli.quick): JSON over plain
HTTP/1.1 (sanbox.cli.plainhttp), sent and read as the SDK's HTTP core does them.

The SDK speaks httpx: its import and a first request (httpcore, anyio, an event loop on a thread)
cost ~0.1 s, many times what the server takes to answer `sanbox ls`. The answers here are the
SDK's: the same headers and timeouts, a status of 400 or more raised as `error_from_response` of
its body, a timeout as the SDK's `RequestTimeoutError`. Where this would not do or say what httpx
does, the request goes through the SDK's own core instead, so the command still does and says
what it always did: a server that cannot be reached (httpx words that error its own way; nothing
was sent), an https URL (httpx verifies against its own CA bundle), credentials in the URL, a
proxy in the environment (httpx goes through it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from ..sdk.config import resolve_config
from ..sdk.errors import ConnectionFailedError, RequestTimeoutError, error_from_response
from ..sdk.paths import segment
from .plainhttp import Broken, Sink, Unreached, exchange

if TYPE_CHECKING:
    from ..sdk.records.computer import ComputerRecord

TIMEOUT = 60.0
"""Seconds, the SDK's default (sanbox.sdk.client.DEFAULT_TIMEOUT)."""
LONG = 600.0
"""Seconds the SDK allows a long call: a lifecycle verb, a create, an update, a snapshot, a fork,
a move, a prune (sdk.computer._LONG, the 600.0 of sdk.templates and sdk.fleet)."""

Params = Mapping[str, str | int | bool | None] | list[tuple[str, str]]


def path(*parts: str) -> str:
    """`/v1/...` from its parts, each a segment as the SDK makes a name or id one."""
    return "/v1/" + "/".join(segment(part) for part in parts)


class Api:
    """The server and key the SDK would use (arguments none: env, then the config file)."""

    def __init__(self) -> None:
        config = resolve_config()
        self.url, self.api_key = config.url, config.api_key
        parts = urlsplit(self.url)
        self._path, self._host, self._port = parts.path, parts.hostname or "", 80
        try:
            self._port = parts.port or 80
        except ValueError:  # not a port: httpx says what is wrong with it, in its words
            self._host = ""
        self._netloc = f"[{self._host}]" if ":" in self._host else self._host
        if self._port != 80:
            self._netloc += f":{self._port}"
        plain = parts.scheme == "http" and not parts.username and not parts.password
        self._direct = plain and bool(self._host) and not _proxied()

    def json(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        timeout: float = TIMEOUT,
        content: bytes | None = None,
    ) -> Any:
        """The answer's JSON (None for an empty one), or the SDK's error for it."""
        status, data = self.request(
            method, path, params=params, body=body, timeout=timeout, content=content
        )
        return json.loads(data) if status != 204 and data else None

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        timeout: float = TIMEOUT,
        content: bytes | None = None,
        sink: Sink | None = None,
    ) -> tuple[int, bytes]:
        """The answer's status and body (what the SDK's `http.request` reads), or the SDK's
        error for it. `content` is sent as bytes (application/octet-stream, as the SDK uploads a
        file); with `sink`, a successful answer's body goes there (as the SDK streams a download)
        and b"" is returned."""
        if self._direct:
            answer = self._send(method, path, _query(params), body, timeout, content, sink)
            if answer is not None:
                status, data = answer
                if status >= 400:
                    raise error_from_response(status, data)
                return answer
        return self._through_sdk(method, path, params, body, timeout, content, sink)

    def _send(
        self,
        method: str,
        path: str,
        query: str,
        body: Any,
        timeout: float,
        content: bytes | None = None,
        sink: Sink | None = None,
    ) -> tuple[int, bytes] | None:
        """Status and body; None if no connection could be made (nothing was sent)."""
        data = b""
        headers = [f"Host: {self._netloc}", "Accept: */*", "User-Agent: sanbox-sdk"]
        if self.api_key:
            headers.append(f"Authorization: Bearer {self.api_key}")
        if content is not None:
            data = content
            headers.append("Content-Type: application/octet-stream")
        elif body is not None:
            text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            data = text.encode()
            headers.append("Content-Type: application/json")
        if content is not None or body is not None or method in ("POST", "PUT", "PATCH"):
            headers.append(f"Content-Length: {len(data)}")
        target = _without_dots(self._path + path) + (f"?{query}" if query else "")
        head = "\r\n".join([f"{method} {target} HTTP/1.1", *headers, "Connection: close", "", ""])
        try:
            return exchange(self._host, self._port, head.encode(), data, timeout, sink)
        except Unreached:
            return None
        except TimeoutError as exc:
            raise RequestTimeoutError(
                f"request to {self.url} timed out", code="timeout", status=None
            ) from exc
        except Broken as exc:
            raise ConnectionFailedError(
                f"cannot reach {self.url}: is `sanbox server` running? ({exc})",
                code="connection_failed",
            ) from exc

    def _through_sdk(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: Any,
        timeout: float,
        content: bytes | None = None,
        sink: Sink | None = None,
    ) -> tuple[int, bytes]:
        import asyncio

        from ..sdk._http import HttpCore

        async def call() -> tuple[int, bytes]:
            core = HttpCore(self.url, self.api_key, TIMEOUT, None)
            try:
                if sink is not None:
                    async with core.stream(method, path, params=params, timeout=timeout) as r:
                        async for chunk in r.aiter_bytes(65536):
                            sink(chunk)
                        return r.status_code, b""
                headers = None if content is None else {"Content-Type": "application/octet-stream"}
                response = await core.request(
                    method,
                    path,
                    params=params,
                    json_body=body,
                    content=content,
                    headers=headers,
                    timeout=timeout,
                )
                return response.status_code, response.content
            finally:
                await core.aclose()

        return asyncio.run(call())


def record(data: Any) -> ComputerRecord:
    """A computer's record from its JSON (the module loaded here: ~5 ms with its events and
    ports, for the commands that read one)."""
    from ..sdk.records.computer import ComputerRecord

    return ComputerRecord.from_json(data)


def computer(api: Api, ref: str) -> ComputerRecord:
    """`client.computers.get(ref)`: the computer by name or id."""
    return record(api.json("GET", path("computers", ref)))


def _proxied() -> bool:
    """A proxy httpx would send a plain-http request through (it reads these variables)."""
    return any(os.environ.get(v) for v in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"))


def _without_dots(target: str) -> str:
    """The path with its `.` and `..` segments resolved, as httpx sends it (`sanbox get ..`
    asks for `/v1`)."""
    segments = target.split("/")
    if "." not in segments and ".." not in segments:
        return target
    kept: list[str] = []
    for part in segments:
        if part == "..":
            if kept and kept != [""]:
                kept.pop()
        elif part != ".":
            kept.append(part)
    return "/".join(kept) or "/"


def _query(params: Params | None) -> str:
    """The query string the SDK would send: None dropped, booleans as true/false."""
    if params is None:
        return ""
    items = params.items() if isinstance(params, Mapping) else params
    kept = [
        (k, json.dumps(v) if isinstance(v, bool) else str(v)) for k, v in items if v is not None
    ]
    return urlencode(kept, quote_via=quote)
