"""The one place the SDK speaks HTTP: auth, error mapping, connection failures."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from .errors import (
    ERROR_BODY_LIMIT,
    ConnectionFailedError,
    RequestTimeoutError,
    SanboxError,
    error_from_response,
)

Params = Mapping[str, str | int | float | bool | None] | list[tuple[str, str]]

# `sanbox server` (uvicorn) closes a connection idle 5 s: one idle longer than this is not
# reused, so a request is never sent on a connection the server is closing at that moment
KEEPALIVE_EXPIRY = 4.0
# sent again once when the server closed their kept-alive connection without an answer (a proxy
# in between may close at another time): they change nothing more the second time
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class HttpCore:
    """An `httpx.AsyncClient` that raises `SanboxError`s and decodes JSON."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.url = url
        self.api_key = api_key
        self.timeout = timeout
        headers = {"User-Agent": "sanbox-sdk"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.headers = headers
        # a plain-http server needs no CA store: loading one costs ~50 ms per CLI command. The
        # bare context still verifies (and so refuses) any https it would meet, e.g. a redirect.
        verify: ssl.SSLContext | bool = True
        if url.startswith("http://"):
            verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.client = httpx.AsyncClient(
            base_url=url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=verify,
            limits=httpx.Limits(  # httpx's own bounds, a shorter keep-alive
                max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY
            ),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json_body: Any = None,
        content: bytes | AsyncIterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
    ) -> httpx.Response:
        again = method in IDEMPOTENT and not isinstance(content, AsyncIterator)
        while True:
            try:
                with self._translated():
                    request = self.client.build_request(
                        method,
                        path,
                        params=_clean(params),
                        json=json_body,
                        content=content,
                        headers=headers,
                        timeout=self.timeout if timeout is None else timeout,
                    )
                    response, error = await self._answer(request)
                break
            except ConnectionFailedError as exc:
                if not (again and isinstance(exc.__cause__, httpx.RemoteProtocolError)):
                    raise
                again = False
        if error is not None:
            raise error_from_response(response.status_code, error)
        return response

    async def _answer(self, request: httpx.Request) -> tuple[httpx.Response, bytes | None]:
        """The response, its body read whole if it succeeded; else the error's body, read no
        further than `ERROR_BODY_LIMIT`."""
        response = await self.client.send(request, stream=True)
        try:
            if response.is_error:
                return response, await _error_body(response)
            await response.aread()
            return response, None
        finally:
            await response.aclose()

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self.request(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @asynccontextmanager
    async def stream(
        self, method: str, path: str, *, params: Params | None = None, timeout: float | None = None
    ) -> AsyncIterator[httpx.Response]:
        """A streamed response, already checked for errors."""
        wait = self.timeout if timeout is None else timeout
        request = self.client.build_request(method, path, params=_clean(params), timeout=wait)
        with self._translated():
            response = await self.client.send(request, stream=True)
        try:
            if response.is_error:
                with self._translated():
                    body = await _error_body(response)
                raise error_from_response(response.status_code, body)
            with self._translated():
                yield response
        finally:
            await response.aclose()

    def _translated(self) -> _Translate:
        return _Translate(self.url)


class _Translate:
    """Turn httpx transport failures into `SanboxError`s (a context manager for `with`)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None or isinstance(exc, SanboxError | asyncio.CancelledError):
            return
        if isinstance(exc, httpx.TimeoutException):
            raise RequestTimeoutError(
                f"request to {self.url} timed out", code="timeout", status=None
            ) from exc
        if isinstance(exc, httpx.TransportError):
            raise ConnectionFailedError(
                f"cannot reach {self.url}: is `sanbox server` running? ({exc})",
                code="connection_failed",
            ) from exc


async def _error_body(response: httpx.Response) -> bytes:
    """An error answer's body up to `ERROR_BODY_LIMIT` bytes; what follows is never read."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= ERROR_BODY_LIMIT:
            break
    return bytes(body[:ERROR_BODY_LIMIT])


def _clean(params: Params | None) -> httpx.QueryParams | None:
    """Drop None values and write booleans as the API expects (`true`/`false`)."""
    if params is None:
        return None
    pairs = params.items() if isinstance(params, Mapping) else params
    items: Iterator[tuple[str, Any]] = iter(pairs)
    out: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in items:
        if value is None:
            continue
        out.append((key, json.dumps(value) if isinstance(value, bool) else str(value)))
    return httpx.QueryParams(out)
