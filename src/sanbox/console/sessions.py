"""Console sessions: an API key traded for a server-side session, and one-time login links.

The browser holds a random session token (32 bytes) in an HttpOnly cookie and nothing else; the
server keeps only its sha256, the id of the key it was made from, its CSRF token and its times.
The key itself is never kept: every request re-reads the key by id through `Keys` (the API's own
check), so a revoked or expired key ends its sessions at their next request.

Sessions end after `IDLE` without a request, `ABSOLUTE` after login, at logout, or when their key
stops working. Memory is bounded: `PER_KEY` sessions per key (a new one ends the oldest) and
`CAPACITY` in all (the least recently used goes first). They live in the server process: a
restart logs everyone out.

A login link (`sanbox console`) is a one-time token for a key, good for `LINK_TTL` seconds: it is
in a URL, so it is never the key, is spent by its first use and expires quickly.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

IDLE = 12 * 3600.0
ABSOLUTE = 7 * 86400.0
PER_KEY = 16
CAPACITY = 10_000
LINK_TTL = 120.0
LINKS = 1_000  # outstanding login links, in all


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Session:
    key_id: str
    csrf: str
    created: float
    seen: float


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._links: OrderedDict[str, tuple[str, float]] = OrderedDict()  # digest -> key, ends

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, key_id: str) -> tuple[str, Session]:
        """A new session for `key_id`: its cookie token (given once) and the session."""
        now = self.clock()
        mine = [d for d, s in self._sessions.items() if s.key_id == key_id]
        for digest in mine[: max(0, len(mine) - PER_KEY + 1)]:
            del self._sessions[digest]
        while len(self._sessions) >= CAPACITY:
            self._sessions.popitem(last=False)
        token = secrets.token_urlsafe(32)
        session = Session(key_id, secrets.token_urlsafe(32), now, now)
        self._sessions[_digest(token)] = session
        return token, session

    def find(self, token: str | None, touch: bool = True) -> Session | None:
        """The live session of a cookie token, marked as used now (`touch`: a request of its
        user, not a live stream's re-check); None if there is none."""
        if not token or len(token) > 128:
            return None
        digest = _digest(token)
        session = self._sessions.get(digest)
        if session is None:
            return None
        now = self.clock()
        if now - session.seen > IDLE or now - session.created > ABSOLUTE:
            del self._sessions[digest]
            return None
        if touch:
            session.seen = now
            self._sessions.move_to_end(digest)
        return session

    def close(self, token: str | None) -> None:
        if token:
            self._sessions.pop(_digest(token), None)

    # login links ------------------------------------------------------------------------------

    def make_link(self, key_id: str) -> str:
        now = self.clock()
        for digest, (_, ends) in list(self._links.items()):
            if ends <= now:
                del self._links[digest]
        while len(self._links) >= LINKS:
            self._links.popitem(last=False)
        token = secrets.token_urlsafe(32)
        self._links[_digest(token)] = (key_id, now + LINK_TTL)
        return token

    def spend_link(self, token: str) -> str | None:
        """The key id of a login link, which can be spent once; None if unknown or expired."""
        if not token or len(token) > 128:
            return None
        found = self._links.pop(_digest(token), None)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]
