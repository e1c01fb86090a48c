"""/v1/keys: create, list and revoke API keys. An admin key manages its org's keys; a host-admin
key every org's (`?org=`). A listing never holds a key, only its prefix; a revoked or expired key
gets 401 from its next request on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..admin_schemas import KeyCreate, KeyInfo, KeyList, KeyOut
from ..schemas import ErrorBody, Name
from .admin import Admin, KeysDep

router = APIRouter(
    prefix="/v1",
    tags=["admin"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404, 409, 422, 429)},
)


@router.post("/keys", status_code=201, response_model=KeyOut)
async def create_key(body: KeyCreate, actor: Admin, k: KeysDep) -> KeyOut:
    """Create a key of the caller's org (another org's, or a host-admin key: host-admin key).
    The key is in this answer only; it stops working at `expires_at` or `expires_in` if given."""
    key, org, plaintext = k.create_key(
        actor, body.org, body.name, body.admin, body.host_admin, body.expires_in, body.expires_at
    )
    return KeyOut(**KeyInfo.of(key, org.name).model_dump(), key=plaintext)


@router.get("/keys", response_model=KeyList)
async def list_keys(
    actor: Admin, k: KeysDep, org: Annotated[Name | None, Query()] = None
) -> KeyList:
    """The caller's org's keys, revoked and expired ones included; every org's for a host-admin
    key (or the one `org` names)."""
    return KeyList(keys=[KeyInfo.of(key, name) for key, name in k.list_keys(actor, org)])


@router.delete("/keys/{key_id}", response_model=KeyInfo)
async def revoke_key(key_id: str, actor: Admin, k: KeysDep) -> KeyInfo:
    """Revoke a key: from its next request on it gets 401. The last host-admin key stays."""
    key, org = k.revoke(actor, key_id)
    return KeyInfo.of(key, org)
