"""/v1/secrets and /v1/computers/{ref}/secrets: credentials the egress proxy adds to a computer's
requests for the secret's hosts, so the computer never holds them. The value is write-only."""

from __future__ import annotations

from fastapi import APIRouter

from ..secret_schemas import (
    BindingPut,
    Secret,
    SecretBinding,
    SecretBindingList,
    SecretList,
    SecretPut,
)
from ._deps import Auth, Plane
from .computers import ERRORS

router = APIRouter(prefix="/v1", tags=["secrets"], responses=ERRORS)


@router.put("/secrets/{name}", response_model=Secret)
async def put_secret(name: str, body: SecretPut, auth: Auth, plane: Plane) -> Secret:
    """Create a secret, or rotate it (version + 1). Computers it is bound to get the new value
    on their next request, without a restart."""
    row = plane.secrets.put(
        auth.org, name, body.value, body.hosts, body.header, body.placeholder_only
    )
    return Secret.of(row)


@router.get("/secrets", response_model=SecretList)
async def list_secrets(auth: Auth, plane: Plane) -> SecretList:
    return SecretList(secrets=[Secret.of(r) for r in plane.secrets.find(auth.org)])


@router.get("/secrets/{name}", response_model=Secret)
async def get_secret(name: str, auth: Auth, plane: Plane) -> Secret:
    return Secret.of(plane.secrets.get(auth.org, name))


@router.delete("/secrets/{name}", response_model=Secret)
async def delete_secret(name: str, auth: Auth, plane: Plane) -> Secret:
    """Delete a secret and its bindings: it is added to no request from now on."""
    return Secret.of(plane.secrets.delete(auth.org, name))


@router.get("/computers/{ref}/secrets", response_model=SecretBindingList)
async def list_bindings(ref: str, auth: Auth, plane: Plane) -> SecretBindingList:
    pairs = plane.secrets.bindings(auth.org, ref)
    return SecretBindingList(bindings=[SecretBinding.of(b, s) for b, s in pairs])


@router.put("/computers/{ref}/secrets/{name}", response_model=SecretBinding)
async def bind_secret(
    ref: str, name: str, body: BindingPut, auth: Auth, plane: Plane
) -> SecretBinding:
    """Bind a secret to a computer: its processes get the placeholder in `env`, and its
    requests to the secret's hosts carry the value. A running computer trusts the org's CA
    (installed now); new commands see the variable."""
    return SecretBinding.of(*await plane.secrets.bind(auth.org, ref, name, body.env))


@router.delete("/computers/{ref}/secrets/{name}", response_model=SecretBinding)
async def unbind_secret(ref: str, name: str, auth: Auth, plane: Plane) -> SecretBinding:
    return SecretBinding.of(*await plane.secrets.unbind(auth.org, ref, name))
