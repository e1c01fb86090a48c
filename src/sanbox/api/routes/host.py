"""/v1/host: what this host is and has."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from ..schemas import HostInfo
from ._deps import Auth, Plane

router = APIRouter(prefix="/v1", tags=["host"])


@router.get("/host", response_model=HostInfo)
async def host_info(_auth: Auth, plane: Plane) -> HostInfo:
    return HostInfo.model_validate(asdict(await plane.host_facts()))
