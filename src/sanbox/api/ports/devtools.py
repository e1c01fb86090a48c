"""A port's answer to a DevTools discovery request, passed on only as the host checked it.

A CDP client (Playwright's `connect_over_cdp`, Puppeteer's `browserURL`, chrome-remote-interface)
first asks the port for `/json/version` (or `/json`, `/json/list`, `/json/new`), then opens the
WebSocket that answer names, sending it the headers it was given: a Sanbox key in its
`Authorization` goes wherever the answer points (Playwright follows a redirect with them too).
The guest writes that answer, and a guest is hostile (root in it, or any process that takes the
port), so the relay holds the answer to such a request, whole, and sends on what
`devtools_answer.checked_answer` made of it: a redirect or an encoded body refused, a body a
client could read as JSON serialized anew with every `webSocketDebuggerUrl` on the Host the
caller used, any other body unchanged. Refused: 502 `devtools_answer_refused`. The host cannot
know which port serves DevTools (the browser type's 9223, a Chromium any computer runs on any
port: the guest decides what listens, the caller where a client points), so every port's
requests whose path ends in one of those four (a client appends them to the endpoint URL's path)
are answered so: a guest's own API at such a path may answer JSON only as JSON. The request goes
without `Accept-Encoding` and `Range`, so the answer is plain and whole.

Bounds, as a guest can be called through its own public port (no rate limit, many connections):
an answer is held up to `MAX_ANSWER` bytes, and refused once a piece of it comes `BODY_TIMEOUT`
after its head or none comes for that long (a minute at most, then); all the answers this
process holds at once up to `HELD_BYTES`, and one computer's up to `COMPUTER_HELD_BYTES` of it
(past either: 503 `devtools_answers_busy`, never a wait: one computer's slow answers cannot take
the others' share); the check runs in a worker thread. json's C parser holds the GIL, so what
keeps the event loop's stall to milliseconds is the check's own bounds (size, containers,
depth), not the thread: the thread keeps the walk and the serializing off the loop.
"""

from __future__ import annotations

import asyncio
import re
import threading

from starlette.types import Message, Receive, Scope, Send

from ..forwarded import forwarded_proto
from .devtools_answer import MAX_ANSWER, Caller, DevToolsAnswerError, checked_answer, head_refusal
from .relay import ByteStream, relay_http, send_error

HELD_BYTES = 16 * 1024 * 1024  # 64 answers at `MAX_ANSWER`; Chromium's are a few KiB
COMPUTER_HELD_BYTES = HELD_BYTES // 4  # one computer's share: 16 answers at `MAX_ANSWER`
BODY_TIMEOUT = 30.0  # Chromium answers at once
CODE = "devtools_answer_refused"
BUSY_CODE = "devtools_answers_busy"
_DISCOVERY = re.compile(r".*/json(?:/(?:version|list|new))?/?", re.IGNORECASE | re.DOTALL)
_HOST = re.compile(r"[a-z0-9.-]{1,253}(?::[0-9]{1,5})?")
_NOT_ASKED = frozenset(b"accept-encoding range if-range".split())


def discovery_request(scope: Scope) -> bool:
    """Whether an HTTP request asks what a DevTools client would connect to."""
    return (
        scope["type"] == "http" and _DISCOVERY.fullmatch(str(scope.get("path") or "")) is not None
    )


def caller_of(scope: Scope) -> Caller | None:
    """The caller's origin, if its Host is one a URL can be made on (a port's host always is)."""
    host = next((v for k, v in scope.get("headers") or [] if k.lower() == b"host"), b"")
    name = host.decode("latin-1").strip().lower()
    if _HOST.fullmatch(name) is None:
        return None
    return Caller(forwarded_proto(scope) == "https", name)


class HeldBytes:
    """The bytes of discovery answers this process holds at once, at most `limit`, and at most
    `each` of them for one holder (a computer): one for all relays (`HELD`), so many slow or
    large answers cost a bounded memory, not one each, and one computer's answers (its public
    port: anyone's connections) leave the rest to the others."""

    def __init__(self, limit: int, each: int | None = None) -> None:
        self.limit = limit
        self.each = limit if each is None else each
        self.held = 0
        self._by: dict[str, int] = {}  # holder -> bytes it holds (none held: no entry)
        self._lock = threading.Lock()  # relays of one process may run on more than one loop

    def take(self, size: int, holder: str = "") -> bool:
        with self._lock:
            mine = self._by.get(holder, 0)
            if self.held + size > self.limit or mine + size > self.each:
                return False
            self.held += size
            self._by[holder] = mine + size
            return True

    def give(self, size: int, holder: str = "") -> None:
        with self._lock:
            self.held -= size
            left = self._by.get(holder, 0) - size
            if left > 0:
                self._by[holder] = left
            else:
                self._by.pop(holder, None)

    def of(self, holder: str) -> int:
        """What `holder` holds now."""
        with self._lock:
            return self._by.get(holder, 0)


HELD = HeldBytes(HELD_BYTES, COMPUTER_HELD_BYTES)


class _Busy(Exception):
    """The process holds `HELD_BYTES` of answers already."""


class _Held:
    """The guest's answer as `relay_http` sends it, held: its head, and its body up to
    `MAX_ANSWER` bytes, taken from `budget` as `holder`'s (its computer). A raise ends the
    relay's download: past the size, the budget or the time, or after a head that is refused
    whatever follows (`refusal` says why, `busy` if it was the budget)."""

    def __init__(self, budget: HeldBytes, holder: str) -> None:
        self.budget, self.holder = budget, holder
        self.start: Message | None = None
        self.body = bytearray()
        self.taken = 0  # of `budget`, given back by `release` once the answer is sent
        self.complete = False
        self.refusal: str | None = None
        self.busy = False
        self._deadline = 0.0

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            self.refusal = head_refusal(message["status"], list(message.get("headers") or []))
            self._deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT
            return
        if message["type"] != "http.response.body":
            return
        chunk = message.get("body", b"")
        if self.refusal is None:
            self.refusal = self._past_bounds(len(chunk))
        if self.refusal is not None:
            raise DevToolsAnswerError(self.refusal)
        if not self.budget.take(len(chunk), self.holder):
            self.busy = True
            raise _Busy
        self.taken += len(chunk)
        self.body += chunk
        self.complete = not message.get("more_body", False)

    def _past_bounds(self, more: int) -> str | None:
        if len(self.body) + more > MAX_ANSWER:
            return f"it is larger than {MAX_ANSWER // 1024} KiB"
        if asyncio.get_running_loop().time() > self._deadline:
            return f"it took longer than {BODY_TIMEOUT:g} s"
        return None

    def take_body(self) -> bytes:
        """The body held, no longer held here (one copy of it, not two)."""
        body, self.body = bytes(self.body), bytearray()
        return body

    def release(self) -> None:
        self.budget.give(self.taken, self.holder)
        self.taken = 0


async def _refuse(send: Send, path: str, why: str) -> None:
    message = (
        f"this port's answer to a DevTools discovery request ({path[:80]}) is not relayed ({why}): "
        "a CDP client would send the headers it was given, your key among them, where such an "
        "answer points. Something in the computer answered so: see what listens on this port there "
        "(the browser type's DevTools front is its `cdp` service)"
    )
    await send_error(send, 502, CODE, message)


async def _busy(send: Send) -> None:
    message = (
        "this server holds as many DevTools discovery answers as it may at once; "
        "try again in a few seconds"
    )
    await send_error(send, 503, BUSY_CODE, message)


async def relay_discovery(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: ByteStream,
    *,
    host_header: str,
    computer: str,
) -> None:
    """`relay_http` of a discovery request (`discovery_request`) to a port of `computer`, its
    answer checked."""
    path = str(scope.get("path") or "")
    caller = caller_of(scope)
    if caller is None:
        await _refuse(send, path, "the request's Host is no port's")
        return
    headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() not in _NOT_ASKED]
    held = _Held(HELD, computer)
    try:
        await relay_http(
            {**scope, "headers": headers},
            receive,
            held.send,
            stream,
            host_header=host_header,
            read_timeout=BODY_TIMEOUT,
        )
        await _send_checked(held, send, path, caller)
    finally:
        held.release()


async def _send_checked(held: _Held, send: Send, path: str, caller: Caller) -> None:
    if held.start is None:  # the client left before anything was sent
        return
    if held.busy:
        await _busy(send)
        return
    if held.refusal is not None:
        await _refuse(send, path, held.refusal)
        return
    if not held.complete:
        await _refuse(send, path, f"it broke off, or took longer than {BODY_TIMEOUT:g} s")
        return
    status, head = held.start["status"], list(held.start.get("headers") or [])
    try:
        head, body = await asyncio.to_thread(checked_answer, status, head, held.take_body(), caller)
    except DevToolsAnswerError as exc:
        await _refuse(send, path, str(exc))
        return
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def relay_port_http(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: ByteStream,
    *,
    host_header: str,
    computer: str,
) -> None:
    """One HTTP request to a port of `computer`: `relay_http`, or `relay_discovery` for a
    discovery request."""
    if discovery_request(scope):
        await relay_discovery(
            scope, receive, send, stream, host_header=host_header, computer=computer
        )
    else:
        await relay_http(scope, receive, send, stream, host_header=host_header)
