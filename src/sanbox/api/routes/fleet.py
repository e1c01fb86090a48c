"""/v1/fleet: hosts joining the fleet (docs/fleet.md). A host-admin key makes a one-time join
token for a region; a host sends it with a certificate request for its own key and gets its
server certificate and the control CA's (the token is its only credential: no API key)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel, Field

from ...control.errors import InvalidRequestError
from ...fleet.hosts import Capacity, HostSpec
from ..auth import Principal, host_admin
from ..schemas import Computer, ErrorBody, Snapshot
from ._deps import Plane

router = APIRouter(
    prefix="/v1/fleet",
    tags=["fleet"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 422)},
)
HostAdmin = Annotated[Principal, Depends(host_admin)]
NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class JoinTokenCreate(BaseModel):
    region: str = Field(pattern=NAME, max_length=32)
    ttl_seconds: float = Field(default=3600.0, gt=0, le=7 * 86400)
    host: str | None = Field(
        default=None,
        pattern=NAME,
        max_length=63,
        description="the host it admits (the one way to join again as a host already known); "
        "none: a new host only",
    )


class JoinTokenOut(BaseModel):
    token: str
    region: str
    ttl_seconds: float
    host: str | None = None


class HostCapacity(BaseModel):
    vcpus: int = Field(ge=1, le=4096)
    memory_mib: int = Field(ge=1, le=1 << 32)
    disk_bytes: int = Field(ge=0, le=1 << 60)
    vm_overhead_mib: int = Field(default=0, ge=0, le=1 << 20)  # per new VM's hypervisor


class JoinRequest(BaseModel):
    token: str = Field(min_length=8, max_length=128)
    name: str = Field(pattern=NAME, max_length=63)
    region: str = Field(pattern=NAME, max_length=32)
    addresses: list[str] = Field(min_length=1, max_length=8)  # its certificate's names
    port: int = Field(default=7071, ge=1, le=65534)  # of its calls; its agent tunnel: the next
    csr: str = Field(max_length=8192)
    capacity: HostCapacity
    hypervisor: str = Field(pattern=r"^[a-z0-9-]{1,32}$")
    accel: str = Field(pattern=r"^[a-z0-9-]{1,16}$")
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)


class HostOut(BaseModel):
    name: str
    region: str
    address: str
    state: str  # up | suspect | lost | draining | retired
    epoch: int
    lease_until: datetime
    hypervisor: str
    accel: str
    labels: dict[str, str]
    vcpus: int
    memory_mib: int
    disk_bytes: int
    alloc_vcpus: int
    alloc_memory_mib: int
    alloc_disk_bytes: int
    vm_overhead_mib: int = 0  # what it counts for a new VM's hypervisor (each VM reserves it)
    layers: list[str] = []  # the template builds it holds (placement needs the one it boots)


class HostList(BaseModel):
    hosts: list[HostOut]


class JoinOut(BaseModel):
    host_id: str
    epoch: int
    certificate: str
    control_ca: str


@router.post("/tokens", response_model=JoinTokenOut, status_code=201)
async def create_join_token(body: JoinTokenCreate, _actor: HostAdmin, plane: Plane) -> JoinTokenOut:
    """A one-time token for a host of `region` to join (host-admin key); shown once."""
    token = await asyncio.to_thread(plane.hosts.token, body.region, body.ttl_seconds, body.host)
    return JoinTokenOut(
        token=token, region=body.region, ttl_seconds=body.ttl_seconds, host=body.host
    )


@router.post("/join", response_model=JoinOut, status_code=201)
async def join_fleet(body: JoinRequest, plane: Plane) -> JoinOut:
    """A host joins with its one-time token: its certificate request signed by the host CA, the
    host registered (a new epoch), the control CA's certificate for it to require of callers."""
    spec = HostSpec(
        name=body.name,
        region=body.region,
        address=f"[{first}]:{body.port}"
        if ":" in (first := body.addresses[0])
        else f"{first}:{body.port}",
        capacity=Capacity(**body.capacity.model_dump()),
        hypervisor=body.hypervisor,
        accel=body.accel,
        labels=body.labels,
    )
    joined = await asyncio.to_thread(plane.hosts.join, body.token, spec, body.addresses, body.csr)
    return JoinOut(
        host_id=joined.lease.host_id,
        epoch=joined.lease.epoch,
        certificate=joined.certificate,
        control_ca=joined.control_ca,
    )


class JobOut(BaseModel):
    name: str  # reconciler | idle | deadlines | pools | usage | hosts (control/jobs.py)
    node: str | None  # the API node that runs it now; None between a holder's end and the next


class JobList(BaseModel):
    node: str  # the API node that answered
    jobs: list[JobOut]


@router.get("/jobs", response_model=JobList)
async def list_jobs(_actor: HostAdmin, plane: Plane) -> JobList:
    """The control plane's singleton jobs and the API node that runs each (host-admin key)."""
    fleet = plane.fleet
    holders = await asyncio.to_thread(fleet.jobs.holders)
    return JobList(node=fleet.node, jobs=[JobOut(name=n, node=h) for n, h in holders.items()])


class MoveRequest(BaseModel):
    host: str | None = Field(default=None, pattern=NAME, max_length=63)  # None: the best


# a retried move with the key of the item's last move answers where it is (control/moving.py)
MoveKey = Annotated[str | None, Header(max_length=200)]


@router.post("/computers/{computer_id}/move", response_model=Computer)
async def move_computer(
    computer_id: str,
    body: MoveRequest,
    _actor: HostAdmin,
    plane: Plane,
    idempotency_key: MoveKey = None,
) -> Computer:
    """Move a stopped computer (of any org) to another host of its region (`host`, or the best
    one), its disk copied and verified (host-admin key). It stays stopped; if anything fails it
    stays where it was, and nothing of it is left on the other host. Sent again with the same
    `Idempotency-Key`, it answers where that move left it."""
    row = await plane.move(computer_id, body.host, idempotency_key)
    return Computer.of(row, await asyncio.to_thread(plane.org_name, row.org_id))


@router.post("/snapshots/{snapshot_id}/move", response_model=Snapshot)
async def move_snapshot(
    snapshot_id: str,
    body: MoveRequest,
    _actor: HostAdmin,
    plane: Plane,
    idempotency_key: MoveKey = None,
) -> Snapshot:
    """Move a snapshot (of any org), its saved memory too, to another host of its region
    (`host`, or the best one): checked by its host, carried, checked and sealed under the other
    host's key (host-admin key). If anything fails it stays where it was. Sent again with the
    same `Idempotency-Key`, it answers where that move left it."""
    row = await plane.move_snapshot(snapshot_id, body.host, idempotency_key)
    return Snapshot.of(row, await asyncio.to_thread(plane.org_name, row.org_id))


@router.get("/hosts", response_model=HostList)
async def list_hosts(_actor: HostAdmin, plane: Plane) -> HostList:
    """The fleet's hosts, their state and lease (host-admin key)."""
    rows = await asyncio.to_thread(plane.hosts.list)
    return HostList(hosts=[HostOut.model_validate(r, from_attributes=True) for r in rows])


@router.get("/hosts/{name}", response_model=HostOut)
async def get_host(name: str, _actor: HostAdmin, plane: Plane) -> HostOut:
    """One host, its state and lease (host-admin key); `host_not_found` if there is none."""
    row = await asyncio.to_thread(plane.hosts.get, name)
    return HostOut.model_validate(row, from_attributes=True)


@router.post("/hosts/{name}/drain", response_model=HostOut)
async def drain_host(name: str, _actor: HostAdmin, plane: Plane) -> HostOut:
    """Place nothing new on the host; its computers stay and run (undo: `/undrain`)."""
    row = await asyncio.to_thread(plane.hosts.drain, name, True)
    return HostOut.model_validate(row, from_attributes=True)


@router.post("/hosts/{name}/undrain", response_model=HostOut)
async def undrain_host(name: str, _actor: HostAdmin, plane: Plane) -> HostOut:
    """Place new computers on a drained host again."""
    row = await asyncio.to_thread(plane.hosts.drain, name, False)
    return HostOut.model_validate(row, from_attributes=True)


class ForgetRequest(BaseModel):
    confirm_dead: bool = Field(
        description="The operator's word that the host is dead and will not come back"
    )


class Forgotten(BaseModel):
    host: HostOut
    computers: list[str]  # the ids of the computers that were on it (their disks went with it)


@router.post("/hosts/{name}/forget", response_model=Forgotten)
async def forget_host(name: str, body: ForgetRequest, _actor: HostAdmin, plane: Plane) -> Forgotten:
    """Retire a `lost` host on the operator's word that it is dead (`confirm_dead`): its
    reservations are dropped and its computers listed (they can be deleted, or made anew from a
    snapshot elsewhere). Refused for a host that is not lost: a partition looks like death."""
    if not body.confirm_dead:
        raise InvalidRequestError(
            "forgetting a host needs confirm_dead: true (its computers' disks are on it)",
            "confirmation_required",
        )
    computers = await asyncio.to_thread(plane.hosts.forget, name)
    row = await asyncio.to_thread(plane.hosts.get, name)
    return Forgotten(host=HostOut.model_validate(row, from_attributes=True), computers=computers)
