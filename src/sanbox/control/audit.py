"""The audit log: one record per request that meant to change something, written by the API once
its outcome is known, read by admins (their org's records; a host admin's, every org's).

A record says who (key id and prefix, org, client address), what (the action: method and route
template, and its target: the path's parameters) and how it ended (status and error code). It
never holds a body, a query string or a key. Records of requests with no known key (wrong or
missing keys, refused addresses) are kept to the latest `keep_anonymous`, so a flood of them can
neither fill the disk nor push out the records of real keys.

Every org's records are bounded too, off the request path (`retention.Sweeper`): records older
than `retention` go, and per org all but its newest `org_cap`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ..store import Database, audit_queries, repo
from ..store.models import AuditRow
from .errors import NotFoundError
from .keys import Principal, require_admin, require_host_admin
from .retention import SWEEP_BATCH, SWEEP_INTERVAL, Sweeper

log = logging.getLogger(__name__)

KEEP_ANONYMOUS = 10_000
PRUNE_EVERY = 100  # anonymous records written between two prunes
RETENTION_DAYS = 90.0  # records older go (SANBOX_AUDIT_RETENTION_DAYS)
ORG_CAP = 1_000_000  # an org's newest records kept (SANBOX_AUDIT_ORG_CAP)


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
        self.sweeper = Sweeper(db, AuditRow, "audit records", retention, org_cap, batch)
        self.db = db
        self.keep_anonymous = keep_anonymous
        self.prune_every = prune_every
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
        """Delete records past the retention, then each org's beyond its cap (retention.py);
        returns how many went. Blocking: the server runs it in a thread."""
        return self.sweeper.sweep(now)

    async def sweep_every(self, interval: float = SWEEP_INTERVAL) -> None:
        await self.sweeper.sweep_every(interval)

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
