"""The audit table's queries: one record written per request that changes something, read by
org in id order, and pruned in bounded batches (control/audit.py keeps the log)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.orm import Session

from .models import AuditRow

_AUDIT = cast(Table, AuditRow.__table__)
_AUDIT_INSERT = insert(_AUDIT).returning(_AUDIT.c.id)


def add_audit(s: Session, **fields: Any) -> int:
    """Insert an audit record (`AuditRow`'s columns); its id. A plain insert on the session's
    connection: every request that changes something writes one, and the ORM's unit of work
    cost several times the insert itself."""
    return int(s.connection().execute(_AUDIT_INSERT, fields).scalar_one())


def audit_records(
    s: Session,
    org_id: str | None,
    after: int | None,
    limit: int,
    *,
    action: str = "",
    key_prefix: str = "",
    code: str = "",
) -> Sequence[AuditRow]:
    """Records of an org (None: all), after an id in order, or else the latest `limit`; only
    those whose action contains `action` (any case), of the key `key_prefix`, that ended with
    `code` (each blank: any). Filtered here, so the bound counts matches, not records read."""
    q = select(AuditRow)
    if org_id is not None:
        q = q.where(AuditRow.org_id == org_id)
    if action:
        q = q.where(AuditRow.action.icontains(action, autoescape=True))
    if key_prefix:
        q = q.where(AuditRow.key_prefix == key_prefix)
    if code:
        q = q.where(AuditRow.code == code)
    if after is not None:
        return s.scalars(q.where(AuditRow.id > after).order_by(AuditRow.id).limit(limit)).all()
    return s.scalars(q.order_by(AuditRow.id.desc()).limit(limit)).all()[::-1]


def prune_anonymous_audit(s: Session, keep: int) -> int:
    """Keep the latest `keep` records of requests that came with no known key; returns how many
    went. Records of known keys are never pruned, so no anonymous flood pushes them out."""
    anonymous = select(AuditRow.id).where(AuditRow.key_id.is_(None)).order_by(AuditRow.id.desc())
    oldest_kept = s.scalars(anonymous.offset(keep - 1).limit(1)).first()
    if oldest_kept is None:
        return 0
    result = s.execute(delete(AuditRow).where(AuditRow.key_id.is_(None), AuditRow.id < oldest_kept))
    return int(getattr(result, "rowcount", 0) or 0)
