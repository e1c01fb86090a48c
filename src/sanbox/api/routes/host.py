"""/v1/host: what this host is and has."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from ...host.disk import can_reflink
from ...host.vmm import cached_accel
from ..schemas import Confinement, HostInfo
from ._deps import Auth, Service

router = APIRouter(prefix="/v1", tags=["host"])


@router.get("/host", response_model=HostInfo)
async def host_info(_auth: Auth, svc: Service) -> HostInfo:
    data_dir = svc.runtime.data_dir
    accel = cached_accel(data_dir.host)
    return HostInfo(
        hypervisor="qemu",
        isolation=f"qemu-{accel.accel}" if accel else "unknown",
        cpus=svc.capacity.cpus,
        memory_mib=svc.capacity.memory_mib,
        data_dir=str(data_dir.root),
        reflink=can_reflink(data_dir.tmp),
        confinement=Confinement.model_validate(await asyncio.to_thread(svc.runtime.confinement)),
    )
