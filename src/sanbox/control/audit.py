"""The audit log: one record per request that meant to change something, written by the API once
its outcome is known, read by admins (their org's records; a host admin's, every org's).

A record says who (key id and prefix, org, client address), what (the action: method and route
template, and its target: the path's parameters) and how it ended (status and error code). It
never holds a body, a query string or a key. Records of requests with no known key (wrong or
missing keys, refused addresses) are kept to the latest `keep_anonymous`, so a flood of them can
neither fill the disk nor push out the records of real keys.

Every org's records are bounded too, off the request path: `sweep` (run by the server every
`SWEEP_INTERVAL` seconds, in a thread) deletes records older than `retention` and, per org,
all but its newest `org_cap`, in transactions of at most `SWEEP_BATCH` rows so no request waits
long behind it. Between two sweeps an org may go over its cap by what it writes meanwhile
(bounded by its keys' request rate).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from ..store import Database, audit_queries, repo
from ..store.models import AuditRow
from .errors import NotFoundError
from .keys import Principal, require_admin, require_host_admin

log = logging.getLogger(__name__)

KEEP_ANONYMOUS = 10_000
PRUNE_EVERY = 100  # anonymous records written between two prunes
RETENTION_DAYS = 90.0  # records older go (SANBOX_AUDIT_RETENTION_DAYS)
ORG_CAP = 1_000_000  # an org's newest records kept (SANBOX_AUDIT_ORG_CAP)
SWEEP_INTERVAL = 300.0  # seconds between two sweeps
SWEEP_BATCH = 1000  # records deleted in one transaction


@dataclass(frozen=True)
class AuditEntry:
    action: str  # `POST /v1/computers/{ref}/stop`
    status: int
    target: dict[str, str] = field(default_factory=dict)
    code: str | None = None
    client: str | None = None
    key_id: str | None = None
    key_prefix: str | None = None
    org_id: str | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class AuditRecord:
    row: AuditRow
    org: str | None  # the org's name


class AuditLog:
    def __init__(
        self,
        db: Database,
        keep_anonymous: int = KEEP_ANONYMOUS,
        prune_every: int = PRUNE_EVERY,
        *,
        retention: timedelta = timedelta(days=RETENTION_DAYS),
        org_cap: int = ORG_CAP,
        batch: int = SWEEP_BATCH,
    ) -> None:
        if org_cap < 1 or batch < 1 or retention <= timedelta(0):
            raise ValueError("org_cap and batch must be at least 1, retention positive")
        self.db = db
        self.keep_anonymous = keep_anonymous
        self.prune_every = prune_every
        self.retention, self.org_cap, self.batch = retention, org_cap, batch
        self._anonymous = 0  # written since the last prune

    def record(self, entry: AuditEntry) -> int:
        """Write a record; returns its id."""
        with self.db.session() as s:
            record_id = audit_queries.add_audit(
                s,
                created_at=entry.at,
                org_id=entry.org_id,
                key_id=entry.key_id,
                key_prefix=entry.key_prefix,
                action=entry.action[:200],
                target=entry.target,
                status=entry.status,
                code=entry.code,
                client=entry.client,
            )
            if entry.key_id is None:
                self._anonymous += 1
                if self._anonymous >= self.prune_every:
                    self._anonymous = 0
                    audit_queries.prune_anonymous_audit(s, self.keep_anonymous)
        return record_id

    def sweep(self, now: datetime | None = None) -> int:
        """Delete records past the retention, then each org's beyond its cap, a batch per
        transaction; returns how many went. Blocking: the server runs it in a thread."""
        before = (now or datetime.now(UTC)) - self.retention
        gone = self._until_done(lambda s: audit_queries.prune_old_audit(s, before, self.batch))
        with self.db.session() as s:
            org_ids = [o.id for o in repo.list_orgs(s)]
        for org_id in org_ids:
            gone += self._until_done(functools.partial(self._prune_org, org_id))
        return gone

    def _prune_org(self, org_id: str, s: Session) -> int:
        return audit_queries.prune_org_audit(s, org_id, self.org_cap, self.batch)

    def _until_done(self, prune: Callable[[Session], int]) -> int:
        gone = 0
        while True:
            with self.db.session() as s:
                n = prune(s)
            gone += n
            if n < self.batch:
                return gone

    async def sweep_every(self, interval: float = SWEEP_INTERVAL) -> None:
        """Sweep now and then every `interval` seconds, until cancelled; a failed sweep is logged
        and tried again at the next."""
        while True:
            try:
                gone = await asyncio.to_thread(self.sweep)
                if gone:
                    log.info("audit: %d records past their retention or their org's cap went", gone)
            except Exception:
                log.exception("audit sweep failed")
            await asyncio.sleep(interval)

    def list(
        self,
        actor: Principal,
        org: str | None = None,
        after: int | None = None,
        limit: int = 100,
        *,
        action: str = "",
        key_prefix: str = "",
        code: str = "",
    ) -> Sequence[AuditRecord]:
        """The actor's org's records, or for a host admin every org's (`org=None`, with the records
        of requests no key was known for) or the named org's; after an id in order, else the
        latest `limit`; only those matching the filters given (`audit_queries.audit_records`)."""
        require_admin(actor)
        with self.db.session() as s:
            if org is None or org == actor.org.name:
                org_id: str | None = None if actor.host_admin and org is None else actor.org.id
            else:
                require_host_admin(actor, f"reading the audit of org {org!r}")
                found = repo.org_by_name(s, org)
                if found is None:
                    raise NotFoundError(f"no org named {org!r}", "org_not_found")
                org_id = found.id
            rows = audit_queries.audit_records(
                s, org_id, after, limit, action=action, key_prefix=key_prefix, code=code
            )
            names = {o.id: o.name for o in repo.list_orgs(s)}
        return [AuditRecord(r, names.get(r.org_id) if r.org_id else None) for r in rows]
