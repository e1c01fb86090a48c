"""Rows kept for a while, then swept (the audit log, events): the queries that delete a table's
oldest rows, by age and beyond an org's newest, each call a bounded batch. The table's model
has an integer `id` that grows with `created_at`, and an `org_id`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session


def prune_old(s: Session, model: Any, before: datetime, batch: int) -> int:
    """Delete up to `batch` of the oldest rows made before `before`; returns how many went.
    Walks from the oldest id and stops at the first younger row, so each call is bounded."""
    oldest = s.execute(select(model.id, model.created_at).order_by(model.id).limit(batch))
    ids = []
    for row_id, created in oldest:
        if created >= before:
            break
        ids.append(row_id)
    if ids:
        s.execute(delete(model).where(model.id.in_(ids)))
    return len(ids)


def prune_org(s: Session, model: Any, org_id: str, keep: int, batch: int) -> int:
    """Delete up to `batch` of an org's oldest rows beyond its newest `keep`."""
    newest = select(model.id).where(model.org_id == org_id).order_by(model.id.desc())
    oldest_kept = s.scalars(newest.offset(keep - 1).limit(1)).first()
    if oldest_kept is None:
        return 0
    q = select(model.id).where(model.org_id == org_id, model.id < oldest_kept)
    ids = list(s.scalars(q.order_by(model.id).limit(batch)))
    if ids:
        s.execute(delete(model).where(model.id.in_(ids)))
    return len(ids)
