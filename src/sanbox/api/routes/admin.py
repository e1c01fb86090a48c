"""/v1/orgs and /v1/keys: tenancy, for admin keys only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from ...control.errors import ConflictError, NotFoundError
from ...control.names import check_name
from ...store import repo
from ..auth import Principal, admin
from ..schemas import ErrorBody, KeyCreate, KeyOut, OrgCreate, OrgList, OrgOut
from ._deps import DB

router = APIRouter(
    prefix="/v1", tags=["admin"], responses={c: {"model": ErrorBody} for c in (401, 403, 409)}
)
Admin = Annotated[Principal, Depends(admin)]


@router.post("/orgs", status_code=201, response_model=OrgOut)
async def create_org(body: OrgCreate, _a: Admin, db: DB) -> OrgOut:
    check_name(body.name)
    with db.session() as s:
        if repo.org_by_name(s, body.name) is not None:
            raise ConflictError(f"an org named {body.name!r} already exists", "name_taken")
        org = repo.create_org(s, body.name)
    return OrgOut(id=org.id, name=org.name, created_at=org.created_at)


@router.get("/orgs", response_model=OrgList)
async def list_orgs(_a: Admin, db: DB) -> OrgList:
    with db.session() as s:
        orgs = repo.list_orgs(s)
    return OrgList(orgs=[OrgOut(id=o.id, name=o.name, created_at=o.created_at) for o in orgs])


@router.post("/keys", status_code=201, response_model=KeyOut)
async def create_key(body: KeyCreate, _a: Admin, db: DB) -> KeyOut:
    with db.session() as s:
        org = repo.org_by_name(s, body.org)
        if org is None:
            raise NotFoundError(
                f"no org named {body.org!r}: `sanbox org create` it", "org_not_found"
            )
        key, plaintext = repo.create_key(s, org, body.name, body.admin)
    return KeyOut(id=key.id, org=org.name, name=key.name, admin=key.admin, key=plaintext,
                  created_at=key.created_at)  # fmt: skip
