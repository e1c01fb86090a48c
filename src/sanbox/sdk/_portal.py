"""How the sync SDK reuses the async one: a private event loop thread and generic wrappers.

`blocking(AsyncThing.method)` turns an async method into a sync method of a `Facade` that
holds the async object; `blocking_iter` does the same for async iterators, and `converting`
wraps what comes back (an `AsyncComputer` becomes a `Computer`). No method is written twice.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import httpx

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A")
C = TypeVar("C", bound=Callable[..., Any])


class Portal:
    """An event loop on a daemon thread; `call` runs a coroutine there and waits for it."""

    _lock = threading.Lock()
    _shared: Portal | None = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="sanbox-sdk", daemon=True
        )
        self._thread.start()

    @classmethod
    def shared(cls) -> Portal:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the sync Sanbox client cannot be called from its own callbacks")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting: cancel the async side too
            raise

    def iterate(self, iterator: AsyncIterator[R]) -> Iterator[R]:
        try:
            while True:
                try:
                    yield self.call(_next(iterator))
                except StopAsyncIteration:
                    return
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                self.call(close())


async def _next(iterator: AsyncIterator[R]) -> R:
    return await iterator.__anext__()


class Facade(Generic[A]):
    """A sync object that forwards to the async object `_async` through a `Portal`."""

    def __init__(self, inner: A, portal: Portal) -> None:
        self._async = inner
        self._portal = portal


def blocking(
    fn: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Facade[A], P], R]:
    def method(self: Facade[A], /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._portal.call(fn(self._async, *args, **kwargs))

    return _named(method, fn)


def converting(
    fn: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
    convert: Callable[[Facade[A], R], T],
) -> Callable[Concatenate[Facade[A], P], T]:
    def method(self: Facade[A], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return convert(self, self._portal.call(fn(self._async, *args, **kwargs)))

    return _named(method, fn)


def blocking_iter(
    fn: Callable[Concatenate[A, P], AsyncIterator[R]],
) -> Callable[Concatenate[Facade[A], P], Iterator[R]]:
    def method(self: Facade[A], /, *args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
        return self._portal.iterate(fn(self._async, *args, **kwargs))

    return _named(method, fn)


def _named(method: C, fn: Callable[..., Any]) -> C:
    method.__name__ = fn.__name__
    method.__qualname__ = fn.__qualname__
    method.__doc__ = fn.__doc__
    return method


class SyncTransportAdapter(httpx.AsyncBaseTransport):
    """Serve the async core with a sync `httpx.BaseTransport`, called in a worker thread."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        sync_request = httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            content=body,
            extensions=request.extensions,
        )
        response = await asyncio.to_thread(self._transport.handle_request, sync_request)
        content = await asyncio.to_thread(response.read)
        response.close()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=content,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await asyncio.to_thread(self._transport.close)
