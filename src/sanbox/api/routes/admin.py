"""/v1/orgs: tenancy. Only a host-admin key creates orgs; an admin key lists its own."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from ...control.keys import Keys
from ..auth import Principal, admin, host_admin
from ..schemas import ErrorBody, OrgCreate, OrgList, OrgOut

router = APIRouter(
    prefix="/v1", tags=["admin"], responses={c: {"model": ErrorBody} for c in (401, 403, 409)}
)
Admin = Annotated[Principal, Depends(admin)]
HostAdmin = Annotated[Principal, Depends(host_admin)]


def keys(request: Request) -> Keys:
    found: Keys = request.app.state.keys
    return found


KeysDep = Annotated[Keys, Depends(keys)]


@router.post("/orgs", status_code=201, response_model=OrgOut)
async def create_org(body: OrgCreate, actor: Admin, k: KeysDep) -> OrgOut:
    """Create an org (host-admin key)."""
    org = k.create_org(actor, body.name)
    return OrgOut(id=org.id, name=org.name, created_at=org.created_at)


@router.get("/orgs", response_model=OrgList)
async def list_orgs(actor: Admin, k: KeysDep) -> OrgList:
    """Every org for a host-admin key; an admin key sees its own."""
    orgs = k.list_orgs(actor)
    return OrgList(orgs=[OrgOut(id=o.id, name=o.name, created_at=o.created_at) for o in orgs])
