"""Console sessions: an API key traded for a server-side session, and one-time login links.

The browser holds a random session token (32 bytes) in an HttpOnly cookie and nothing else; the
server keeps only its sha256, the id of the key it was made from, its CSRF token and its times.
The key itself is never kept: every request re-reads the key by id through `Keys` (the API's own
check), so a revoked or expired key ends its sessions at their next request.

Sessions end after `IDLE` without a request, `ABSOLUTE` after login, at logout, or when their key
stops working. They are bounded: `PER_KEY` sessions per key (a new one ends the oldest),
`PER_ORG` per org (a new one ends that org's least recently used: one tenant's logins never end
another's, however many keys it makes) and `CAPACITY` in all (the least recently used goes
first). They are kept in the database, so every API node of a fleet knows every session and a
restart logs no one out; a session's last use is written at most every `TOUCH_EVERY` seconds,
not at every request.

A login link (`sanbox console`) is a one-time token for a key, good for `LINK_TTL` seconds: it is
in a URL, so it is never the key, is spent by its first use (one delete: of two nodes spending
it at once, one gets it) and expires quickly. Outstanding links are bounded per org
(`LINKS_PER_ORG`, its soonest to end go first) and in all (`LINKS`).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.orm import Session as DbSession

from ..store import Database
from ..store.models import ApiKey, ConsoleSessionRow, LoginLinkRow

IDLE = 12 * 3600.0
ABSOLUTE = 7 * 86400.0
PER_KEY = 16
PER_ORG = 1_000
CAPACITY = 10_000
LINK_TTL = 120.0
LINKS_PER_ORG = 100  # outstanding login links of one org's keys
LINKS = 1_000  # outstanding login links, in all
TOUCH_EVERY = 60.0  # seconds: a session's last use is written at most this often


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    key_id: str
    csrf: str
    created: float
    seen: float


class Sessions:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    def __len__(self) -> int:
        with self.db.session() as s:
            return int(s.scalar(select(func.count()).select_from(ConsoleSessionRow)) or 0)

    def open(self, key_id: str) -> tuple[str, Session]:
        """A new session for `key_id`: its cookie token (given once) and the session."""
        now = self.clock()
        token = secrets.token_urlsafe(32)
        session = Session(key_id, secrets.token_urlsafe(32), now, now)
        t = ConsoleSessionRow
        with self.db.session() as s:
            s.execute(delete(t).where(or_(t.seen < now - IDLE, t.created < now - ABSOLUTE)))
            mine = s.scalars(select(t.digest).where(t.key_id == key_id).order_by(t.seen)).all()
            _drop(s, mine[: max(0, len(mine) - PER_KEY + 1)])
            theirs = _of_org(s, t.digest, t.key_id, key_id, t.seen)
            _drop(s, theirs[: max(0, len(theirs) - PER_ORG + 1)])
            over = int(s.scalar(select(func.count()).select_from(t)) or 0) - CAPACITY + 1
            if over > 0:  # the least recently used go
                _drop(s, s.scalars(select(t.digest).order_by(t.seen).limit(over)).all())
            row = t(digest=_digest(token), key_id=key_id, csrf=session.csrf, created=now, seen=now)
            s.add(row)
        return token, session

    def find(self, token: str | None, touch: bool = True) -> Session | None:
        """The live session of a cookie token, marked as used now (`touch`: a request of its
        user, not a live stream's re-check); None if there is none."""
        if not token or len(token) > 128:
            return None
        now = self.clock()
        with self.db.session() as s:
            row = s.get(ConsoleSessionRow, _digest(token))
            if row is None:
                return None
            if now - row.seen > IDLE or now - row.created > ABSOLUTE:
                s.delete(row)
                return None
            if touch and now - row.seen >= TOUCH_EVERY:
                row.seen = now
            return Session(row.key_id, row.csrf, row.created, row.seen)

    def close(self, token: str | None) -> None:
        if token:
            with self.db.session() as s:
                _drop(s, [_digest(token)])

    # login links ------------------------------------------------------------------------------

    def make_link(self, key_id: str) -> str:
        now = self.clock()
        token = secrets.token_urlsafe(32)
        t = LoginLinkRow
        with self.db.session() as s:
            s.execute(delete(t).where(t.ends <= now))
            theirs = _of_org(s, t.digest, t.key_id, key_id, t.ends)
            s.execute(
                delete(t).where(t.digest.in_(theirs[: max(0, len(theirs) - LINKS_PER_ORG + 1)]))
            )
            over = int(s.scalar(select(func.count()).select_from(t)) or 0) - LINKS + 1
            if over > 0:  # the soonest to end go
                oldest = s.scalars(select(t.digest).order_by(t.ends).limit(over)).all()
                s.execute(delete(t).where(t.digest.in_(oldest)))
            s.add(t(digest=_digest(token), key_id=key_id, ends=now + LINK_TTL))
        return token

    def peek_link(self, token: str) -> str | None:
        """The key id of a login link still good, without spending it; None if there is none."""
        if not token or len(token) > 128:
            return None
        with self.db.session() as s:
            row = s.get(LoginLinkRow, _digest(token))
            return None if row is None or row.ends <= self.clock() else str(row.key_id)

    def spend_link(self, token: str) -> str | None:
        """The key id of a login link, which can be spent once; None if unknown or expired."""
        if not token or len(token) > 128:
            return None
        t = LoginLinkRow
        with self.db.session() as s:
            found = s.execute(
                delete(t).where(t.digest == _digest(token)).returning(t.key_id, t.ends)
            ).one_or_none()
        if found is None or found.ends <= self.clock():
            return None
        return str(found.key_id)


def _of_org(
    s: DbSession,
    digest: InstrumentedAttribute[str],
    owner: InstrumentedAttribute[str],
    key_id: str,
    order: InstrumentedAttribute[float],
) -> Sequence[str]:
    """The digests of the rows (sessions or links) of every key of `key_id`'s org, in `order`
    (none for a key that is not in the database)."""
    org = select(ApiKey.org_id).where(ApiKey.id == key_id).scalar_subquery()
    keys = select(ApiKey.id).where(ApiKey.org_id == org)
    return s.scalars(select(digest).where(owner.in_(keys)).order_by(order)).all()


def _drop(s: DbSession, digests: Sequence[str]) -> None:
    if digests:
        s.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.digest.in_(digests)))
