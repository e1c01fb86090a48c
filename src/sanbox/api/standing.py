"""A long-lived connection (a WebSocket, a followed stream) lasts only as long as what let it in
stands: an API key not revoked or expired, a console session not ended. `check` is looked at
again every `RECHECK` seconds while it runs, a quiet one too; when it no longer stands the work
is cancelled (the API's streams and the console's share this)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine
from typing import Any

from starlette.requests import HTTPConnection

from ..control.errors import AuthError, ControlError
from ..control.keys import Keys
from ..tasks import cancel_and_wait
from .auth import bearer_token

RECHECK = 5.0  # seconds between the checks of a live stream's or socket's standing
KEY_LAPSED = "this API key was revoked or has expired: the connection ends"
Check = Callable[[], bool]  # True: it still stands


class Standing:
    """What a connection lasts while, when that is more than one thing (a port's: its key, and
    its publication): checks that must all stand, each with the error its connection is answered
    or ended with once it does not. A `Check` itself; `lapsed` is the error of the first check
    that failed (None while all stand)."""

    def __init__(self, *checks: tuple[Check, ControlError]) -> None:
        self.checks = checks
        self.lapsed: ControlError | None = None

    def __call__(self) -> bool:
        for check, error in self.checks:
            if not check():
                self.lapsed = error
                return False
        return True


def key_stands(conn: HTTPConnection) -> Check:
    """The check of the key the connection presented (no request taken, no failure counted)."""
    keys: Keys = conn.app.state.keys
    return token_stands(keys, bearer_token(conn))


def token_stands(keys: Keys, token: str | None) -> Check:
    """The check of a presented key."""
    return lambda: keys.stands(token)


def key_id_stands(keys: Keys, key_id: str) -> Check:
    """The check of a key known by id (a port cookie or view link names the key it came from)."""

    def check() -> bool:
        try:
            keys.principal_of(key_id, take=False)
        except AuthError:
            return False
        return True

    return check


async def lapsed(check: Check, every: float | None = None) -> None:
    """Return once `check` no longer stands, looking every `every` seconds (`RECHECK`)."""
    while True:
        await asyncio.sleep(every or RECHECK)
        if not check():
            return


async def while_standing(
    check: Check, work: Coroutine[Any, Any, None], every: float | None = None
) -> bool:
    """Run `work` until it ends or `check` no longer stands; False if it lapsed first (`work` is
    cancelled)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(lapsed(check, every))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
            return True
        return False
    finally:
        for pending in (task, watch):
            await cancel_and_wait(pending, (Exception,))


class Lapsed(Exception):
    """What let a download or a port's exchange in no longer stands: its response is cut, never
    ended as whole. Raised through the server, which aborts the connection; not an error of the
    server's: `errors.py` logs it as a line of information, and `QuietLapses` keeps the ASGI
    server's traceback of it out of the log."""


class QuietLapses(logging.Filter):
    """On the ASGI server's error logger: drops its "Exception in ASGI application" record for a
    response cut on purpose (`Lapsed`); every other record goes through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], Lapsed))


def quiet_lapses(logger: logging.Logger) -> None:
    """Put `QuietLapses` on `logger` once."""
    if not any(isinstance(f, QuietLapses) for f in logger.filters):
        logger.addFilter(QuietLapses())


async def chunks_while_standing(
    check: Check, chunks: AsyncIterable[Any], every: float | None = None, cut: bool = False
) -> AsyncIterator[Any]:
    """`chunks` as they come, until they end or `check` no longer stands: then they end (a
    followed stream), or with `cut` raise `Lapsed` (a download: a body that ends short of its
    file, sent chunked, would read as the whole file)."""
    every = every or RECHECK
    source = aiter(chunks)
    checked = time.monotonic()
    coming = asyncio.ensure_future(anext(source, None))
    try:
        while True:
            await asyncio.wait({coming}, timeout=every)
            if time.monotonic() - checked >= every:
                checked = time.monotonic()
                if not check():
                    if cut:
                        raise Lapsed(KEY_LAPSED)
                    return
            if not coming.done():
                continue
            chunk = coming.result()
            if chunk is None:
                return
            yield chunk
            coming = asyncio.ensure_future(anext(source, None))
    finally:
        await cancel_and_wait(coming, (Exception,))
        if (aclose := getattr(source, "aclose", None)) is not None:  # its stream ends now
            with contextlib.suppress(Exception):
                await aclose()
