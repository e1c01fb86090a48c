"""The link to one fleet host, as the control plane holds it: HTTPS with mutual TLS to its host
agent (agent.py), each call with an operation id of its own (a retry after a dropped link sends
the same id, and the host's journal answers it without running it twice); its report, read every
`REPORT_EVERY` seconds, which is also how the control plane knows the host is there (a host
whose report cannot be read is unreachable: its calls fail with `host_unreachable` within
seconds, never hang: one refused at once, one already waiting for its answer once no report has
been read for `SILENT_AFTER`, as when its event loop stops or a partition leaves the connection
open and silent); and the open streams to its guests' agents, cut when it goes silent.
`RemoteHost` (remote.py) is the `Host` protocol over it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from ...host.door import HostError
from ...tasks import cancel_and_wait
from . import wire
from .agent import OPERATION
from .pki import identity_name

CALL_TIMEOUT = 300.0  # a boot under TCG and load, a snapshot of a large guest
CONNECT_TIMEOUT = 2.0  # a host that does not answer in this is unreachable
REPORT_EVERY = 2.0
REPORT_TIMEOUT = 3.0  # a report not read in this: the host is unreachable (a partition shows
# within REPORT_EVERY + REPORT_TIMEOUT)
RETRY_EVERY = 0.5  # a host that did not answer is asked again this soon
STALE_AFTER = 10.0  # a report older than this: the host is unreachable
SILENT_AFTER = STALE_AFTER  # no report read for this long: a call waiting on the host is cut
CHUNK = 1 << 20  # bytes of a disk carried at a time
STALL_TIMEOUT = 60.0  # a carry whose bytes stop moving (either host) is cut after this long
RETRIES = 2  # a call whose link dropped before an answer is sent again, same operation id
# a host is not trusted to end what it sends: a report is read whole within REPORT_DEADLINE and
# MOST_REPORT bytes, a call's answer within CALL_DEADLINE and MOST_ANSWER bytes (an answer that
# trickles a byte at a time passes every per-read timeout)
REPORT_DEADLINE = 10.0
MOST_REPORT = 32 << 20
CALL_DEADLINE = 1800.0
MOST_ANSWER = 64 << 20


class HostUnreachableError(HostError):
    code = "host_unreachable"


def why(exc: httpx.HTTPError) -> str:
    """What went wrong, in words: httpx's timeouts carry no message of their own."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"no connection within {CONNECT_TIMEOUT:.0f} s (it accepts none, or is frozen)"
    if isinstance(exc, httpx.TimeoutException):
        return "it took no request or sent no answer in time"
    return str(exc) or type(exc).__name__


def link_client(tls: ssl.SSLContext) -> dict[str, Any]:
    """An httpx client's settings for a host's link: its TLS, and no proxy from the environment
    (`HTTPS_PROXY`): a host is dialled itself, and httpcore's proxy path sends no `sni_hostname`,
    so the host's own name would go unchecked (`extensions`)."""
    return {"verify": tls, "trust_env": False}


class HostLink:
    def __init__(
        self,
        name: str,
        url: str,
        tunnel: tuple[str, int],
        tls: ssl.SSLContext,
        *,
        by_identity: bool = True,
        pinned: str | None = None,
    ) -> None:
        """`by_identity`: the host's certificate must carry its `identity_name` (every host
        that joined from migration 0023 on); else, for a host that joined before, the address
        dialled is checked, as then. `pinned`: the certificate fingerprint `tls` pins
        (`pki.client_tls`), kept to see when the host's record names another."""
        self.name = name
        self._bind(url, tunnel, tls, by_identity, pinned)
        self._report: dict[str, Any] | None = None
        self._read_at = 0.0
        self._waiting: set[asyncio.Timeout] = set()  # calls waiting for the host's answer
        self._watch: asyncio.Task[None] | None = None
        self._tunnels: set[asyncio.StreamWriter] = set()  # open streams to its guests' agents

    def _bind(
        self,
        url: str,
        tunnel: tuple[str, int],
        tls: ssl.SSLContext,
        by_identity: bool,
        pinned: str | None,
    ) -> None:
        self.url = url.rstrip("/")
        self.tunnel = tunnel
        self.tls = tls
        self.server_name = identity_name(self.name) if by_identity else None
        self.pinned = pinned
        timeout = httpx.Timeout(CALL_TIMEOUT, connect=CONNECT_TIMEOUT)
        hooks = {"request": [self._named]}
        self._http = httpx.AsyncClient(**link_client(tls), timeout=timeout, event_hooks=hooks)

    async def rebind(
        self,
        url: str,
        tunnel: tuple[str, int],
        tls: ssl.SSLContext,
        *,
        by_identity: bool,
        pinned: str | None,
    ) -> None:
        """The host's record changed (another address, or it joined again: a certificate of its
        own name, another pinned): calls and tunnels go the new way from now on, through this
        link, which every machine on the host holds; what went the old way is cut (a certificate
        the host's join replaced is revoked), and the host is unreachable until its next
        report."""
        old = self._http
        self._bind(url, tunnel, tls, by_identity, pinned)
        self.lost()
        await old.aclose()

    def extensions(self) -> dict[str, Any]:
        """What a request to the host carries so that its certificate is checked for the name
        asked for (httpcore's `sni_hostname`: the name sent and verified, not the URL's)."""
        return {} if self.server_name is None else {"sni_hostname": self.server_name}

    async def _named(self, request: httpx.Request) -> None:
        request.extensions.update(self.extensions())

    async def open(self) -> None:
        """Read the first report (HostUnreachableError if the host does not answer), then keep
        reading it in the background."""
        await self.refresh()
        self.keep_reading()

    def keep_reading(self) -> None:
        """Read the host's report every `REPORT_EVERY` seconds from now on (a host that does not
        answer is unreachable until it does)."""
        if self._watch is None:
            self._watch = asyncio.ensure_future(self._keep_reading())

    async def close(self) -> None:
        if self._watch is not None:
            await cancel_and_wait(self._watch)
        await self._http.aclose()

    async def refresh(self) -> dict[str, Any]:
        http = self._http
        try:
            async with asyncio.timeout(REPORT_DEADLINE):
                url = f"{self.url}/v1/host/report"
                async with http.stream("GET", url, timeout=REPORT_TIMEOUT) as r:
                    r.raise_for_status()
                    report = await self._json(r, MOST_REPORT)
            try:
                report = wire.report_in(report)
            except ValueError as exc:
                said = f"host {self.name} sent a report that is not one: {exc}"
                raise HostUnreachableError(said) from None
        except (httpx.HTTPError, TimeoutError, HostUnreachableError) as exc:
            self.lost()  # unreachable from now until a report is read again
            if isinstance(exc, HostUnreachableError):
                raise
            said = why(exc) if isinstance(exc, httpx.HTTPError) else "its report did not end"
            raise HostUnreachableError(f"host {self.name} did not answer: {said}") from exc
        if http is not self._http:  # bound again meanwhile: a report of the old way counts not
            raise HostUnreachableError(f"host {self.name} joined again: its report is read anew")
        self._report, self._read_at = report, time.monotonic()
        later = asyncio.get_running_loop().time() + SILENT_AFTER
        for waiting in self._waiting:  # the host is there: each may wait on
            waiting.reschedule(later)
        return self._report

    async def _keep_reading(self) -> None:
        while True:
            with contextlib.suppress(HostUnreachableError):
                await self.refresh()
            await asyncio.sleep(REPORT_EVERY if self.reachable else RETRY_EVERY)

    def lost(self) -> None:
        """Something of the host did not answer: unreachable until a report is read again, and
        every open stream to its guests is cut, so a call waiting on one (a partition leaves
        TCP connections open and silent) fails now instead of hanging."""
        self._read_at = 0.0
        for writer in self._tunnels:
            writer.transport.abort()
        self._tunnels.clear()

    def tunnel_opened(self, writer: asyncio.StreamWriter) -> None:
        self._tunnels = {w for w in self._tunnels if not w.is_closing()}
        self._tunnels.add(writer)

    @property
    def reachable(self) -> bool:
        return self._report is not None and time.monotonic() - self._read_at < STALE_AFTER

    @property
    def epoch(self) -> str | None:
        return None if self._report is None else str(self._report["epoch"])

    def _latest(self) -> dict[str, Any]:
        if self._report is None or not self.reachable:
            raise HostUnreachableError(f"host {self.name} has not reported: it is unreachable")
        return self._report

    @contextlib.asynccontextmanager
    async def answered(self, what: str) -> AsyncIterator[None]:
        """Wait for the host's answer to `what` while the host is heard from: cut, with
        HostUnreachableError, once no report has been read for `SILENT_AFTER` (since the wait
        began, or since the last one read), rather than waiting out `CALL_TIMEOUT`. A link that
        reads no reports (not kept reading) waits as long as the call's timeout."""
        if self._watch is None:
            yield
            return
        deadline = asyncio.timeout(SILENT_AFTER)
        try:
            async with deadline:
                self._waiting.add(deadline)
                try:
                    yield
                finally:
                    self._waiting.discard(deadline)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise HostUnreachableError(
                f"host {self.name} stopped answering: no report for {SILENT_AFTER:.0f} s while "
                f"waiting for {what} (it may still be done there)"
            ) from None

    async def put_stream(
        self, what: str, url: str, chunks: AsyncIterator[bytes], headers: dict[str, str]
    ) -> Any:
        """PUT `chunks` (a carry's bytes) to the host; the value it answers. Cut if no chunk
        moves for `STALL_TIMEOUT` while they flow (the host sending them stopped sending, or
        this one stopped taking), rather than waiting out `CALL_TIMEOUT`; once the last has
        gone, the answer (the host's checks) is read as a call's: whole within `CALL_DEADLINE`
        and `MOST_ANSWER` bytes, and cut once the host is no longer heard from."""
        moving = _Moving(chunks)
        try:
            async with asyncio.timeout(STALL_TIMEOUT) as moving.deadline:
                body = moving.body()
                try:
                    async with (
                        self.answered(what),
                        self._http.stream("PUT", url, content=body, headers=headers) as r,
                    ):
                        status, answer = r.status_code, await self._json(r, MOST_ANSWER)
                finally:  # cut short: closed now, not when the collector finds it
                    await body.aclose()
        except TimeoutError:
            if moving.sent:
                raise HostUnreachableError(
                    f"host {self.name} did not end its answer to {what} in {CALL_DEADLINE:.0f} s"
                ) from None
            raise HostUnreachableError(
                f"the transfer to host {self.name} stalled: no byte moved for "
                f"{STALL_TIMEOUT:.0f} s (the host sending it, or {self.name}, stopped)"
            ) from None
        except httpx.TransportError as exc:
            raise HostUnreachableError(
                f"host {self.name} dropped the transfer: {why(exc)}"
            ) from exc
        return self.value(what, status, answer)

    async def call(self, name: str, **args: Any) -> Any:
        """One call of the door on the host, sent again (same operation id) if the link drops
        before its answer; HostUnreachableError if the host cannot be reached at all, or its
        answer does not end within `CALL_DEADLINE`."""
        try:
            async with asyncio.timeout(CALL_DEADLINE):
                status, body = await self._answer(name, args)
        except TimeoutError:
            raise HostUnreachableError(
                f"host {self.name} did not end its answer to {name} in {CALL_DEADLINE:.0f} s"
            ) from None
        return self.value(name, status, body)

    def value(self, what: str, status: int, body: Any) -> Any:
        """The value a host's answer to `what` carries, or the error it names."""
        if not isinstance(body, dict):
            raise HostUnreachableError(f"host {self.name} answered {what} with no object")
        if status == 200 and "value" in body:
            return body["value"]
        if not isinstance(body.get("error"), dict):
            raise HostUnreachableError(f"host {self.name} answered {what} with no error")
        raise wire.error_in(body["error"])

    async def refused(self, what: str, response: httpx.Response) -> HostError:
        """The error a host's answer that is not 200 names (read as a call's: whole within
        `CALL_DEADLINE` and `MOST_ANSWER` bytes)."""
        try:
            async with asyncio.timeout(CALL_DEADLINE):
                body = await self._json(response, MOST_ANSWER)
        except TimeoutError:
            return HostUnreachableError(
                f"host {self.name} did not end its answer to {what} in {CALL_DEADLINE:.0f} s"
            )
        try:
            self.value(what, response.status_code, body)
        except HostError as exc:
            return exc
        return HostUnreachableError(f"host {self.name} answered {what} with no error")

    async def _answer(self, name: str, args: dict[str, Any]) -> tuple[int, Any]:
        op_id = secrets.token_hex(12)
        last: httpx.TransportError | None = None
        url = f"{self.url}/v1/host/calls/{name}"
        for _ in range(1 + RETRIES):
            try:
                async with (
                    self.answered(f"the call {name}"),
                    self._http.stream("POST", url, json=args, headers={OPERATION: op_id}) as r,
                ):
                    return r.status_code, await self._json(r, MOST_ANSWER)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise HostUnreachableError(f"host {self.name} is unreachable: {why(exc)}") from exc
            except httpx.TransportError as exc:  # sent, perhaps run: ask again, same id
                last = exc
                continue
        raise HostUnreachableError(
            f"host {self.name} dropped the call {name}: {why(last) if last else 'no answer'}"
        )

    async def _json(self, response: httpx.Response, most: int) -> Any:
        """The answer's JSON, read no further than `most` bytes."""
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > most:
                raise HostUnreachableError(f"host {self.name} sent over {most >> 20} MiB")
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise HostUnreachableError(f"host {self.name} sent no JSON: {exc}") from None


class _Moving:
    """A carry's bytes on their way: `deadline` pushed back as each chunk comes and as each is
    taken; once the last has gone (`sent`), the answer is given `CALL_DEADLINE`."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks
        self.deadline: asyncio.Timeout | None = None
        self.sent = False

    async def body(self) -> AsyncGenerator[bytes, None]:
        assert self.deadline is not None
        loop = asyncio.get_running_loop()
        async for data in self.chunks:
            self.deadline.reschedule(loop.time() + STALL_TIMEOUT)
            yield data
            self.deadline.reschedule(loop.time() + STALL_TIMEOUT)
        self.sent = True
        self.deadline.reschedule(loop.time() + CALL_DEADLINE)
