"""/v1/orgs: tenancy. Only a host-admin key creates orgs and sets quotas; an admin key lists its
own org, any key reads its own org's quota."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from ...control import quotas
from ...control.keys import Keys
from ..admin_schemas import (
    OrgCreate,
    OrgList,
    OrgOut,
    OrgRegions,
    OrgRegionsOut,
    QuotaLimits,
    QuotaOut,
    QuotaUse,
)
from ..auth import Principal, admin, host_admin, principal
from ..schemas import ErrorBody

router = APIRouter(
    prefix="/v1", tags=["admin"], responses={c: {"model": ErrorBody} for c in (401, 403, 409)}
)
Admin = Annotated[Principal, Depends(admin)]
HostAdmin = Annotated[Principal, Depends(host_admin)]
Anyone = Annotated[Principal, Depends(principal)]


async def keys(request: Request) -> Keys:  # async: no thread hop a call
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


def _quota_out(org: str, quota: quotas.Quota, use: quotas.Use) -> QuotaOut:
    return QuotaOut(org=org, limits=QuotaLimits(**asdict(quota)), use=QuotaUse(**asdict(use)))


@router.get("/orgs/{org}/quota", response_model=QuotaOut, responses={404: {"model": ErrorBody}})
async def get_quota(org: str, actor: Anyone, k: KeysDep) -> QuotaOut:
    """An org's quota and what it uses now (its own with any key; any org's, host-admin key)."""
    return _quota_out(*k.quota(actor, org))


@router.put("/orgs/{org}/quota", response_model=QuotaOut, responses={404: {"model": ErrorBody}})
async def set_quota(org: str, body: QuotaLimits, actor: Admin, k: KeysDep) -> QuotaOut:
    """Replace an org's quota (host-admin key; null or absent fields: no limit)."""
    k.set_quota(actor, org, quotas.Quota(**body.model_dump()))
    return _quota_out(*k.quota(actor, org))


@router.get(
    "/orgs/{org}/regions", response_model=OrgRegionsOut, responses={404: {"model": ErrorBody}}
)
async def get_regions(org: str, actor: Anyone, k: KeysDep) -> OrgRegionsOut:
    """Where an org's computers may run: its home region and the others they may ask for (its
    own with any key; any org's, host-admin key)."""
    name, home, allowed = k.regions(actor, org)
    return OrgRegionsOut(org=name, home=home, allowed=allowed)


@router.put(
    "/orgs/{org}/regions", response_model=OrgRegionsOut, responses={404: {"model": ErrorBody}}
)
async def set_regions(org: str, body: OrgRegions, actor: Admin, k: KeysDep) -> OrgRegionsOut:
    """Set an org's home region and the others it may use (host-admin key). Its computers keep
    the region they were made in."""
    k.set_regions(actor, org, body.home, body.allowed)
    name, home, allowed = k.regions(actor, org)
    return OrgRegionsOut(org=name, home=home, allowed=allowed)
