"""/v1/audit: who changed what, and how it ended (admin keys: their org's records; a host-admin
key every org's, or the one `org` names)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ...control.audit import AuditLog
from ..admin_schemas import AuditList, AuditRecordOut
from ..schemas import ErrorBody, Name
from .admin import Admin

router = APIRouter(
    prefix="/v1", tags=["admin"], responses={c: {"model": ErrorBody} for c in (401, 403, 404)}
)


@router.get("/audit", response_model=AuditList)
async def list_audit(
    request: Request,
    actor: Admin,
    org: Annotated[Name | None, Query()] = None,
    after: Annotated[int | None, Query(ge=0, description="records after this id, in order")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditList:
    """Records of requests that meant to change something; without `after`, the latest `limit`."""
    audit: AuditLog = request.app.state.audit
    records = audit.list(actor, org, after, limit)
    return AuditList(records=[AuditRecordOut.of(r.row, r.org) for r in records])
