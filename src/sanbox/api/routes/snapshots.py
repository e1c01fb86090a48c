"""/v1/snapshots and /v1/computers/{ref}/snapshots, /fork: prepared state. A snapshot keeps a
computer's disk (and, asked, its memory and processes) for the org; a fork is N new computers
from a computer as it is now."""

from __future__ import annotations

from fastapi import APIRouter

from ..schemas import (
    Computer,
    ComputerList,
    ForkRequest,
    Snapshot,
    SnapshotCreate,
    SnapshotList,
)
from ._deps import Auth, Plane
from .computers import ERRORS

router = APIRouter(prefix="/v1", tags=["snapshots"], responses=ERRORS)


@router.post("/computers/{ref}/snapshots", response_model=Snapshot, status_code=201)
async def create_snapshot(ref: str, body: SnapshotCreate, auth: Auth, plane: Plane) -> Snapshot:
    """Snapshot a computer: its disk, taken consistently (the guest's filesystems frozen for the
    moment it takes), or with `memory` its memory, devices and processes too. The computer runs on
    as it was, paused at most briefly. Answered once the snapshot is durable and verified."""
    row = await plane.snapshot(auth.org, ref, body.memory, body.name)
    return Snapshot.of(row, auth.org.name)


@router.get("/snapshots", response_model=SnapshotList)
async def list_snapshots(auth: Auth, plane: Plane) -> SnapshotList:
    return SnapshotList(
        snapshots=[Snapshot.of(r, auth.org.name) for r in plane.snapshots(auth.org)]
    )


@router.get("/snapshots/{ref}", response_model=Snapshot)
async def get_snapshot(ref: str, auth: Auth, plane: Plane) -> Snapshot:
    return Snapshot.of(plane.get_snapshot(auth.org, ref), auth.org.name)


@router.delete("/snapshots/{ref}", response_model=Snapshot)
async def delete_snapshot(ref: str, auth: Auth, plane: Plane) -> Snapshot:
    """Delete a snapshot; computers made from it keep working."""
    return Snapshot.of(await plane.delete_snapshot(auth.org, ref), auth.org.name)


@router.post("/computers/{ref}/fork", response_model=ComputerList, status_code=201)
async def fork_computer(ref: str, body: ForkRequest, auth: Auth, plane: Plane) -> ComputerList:
    """`count` new running computers from this one as it is now: with its memory and processes
    if it runs or is paused (each with a new hostname, machine-id, SSH host keys, entropy and
    clock), else booted on a copy of its disk. All are made, or none."""
    rows = await plane.fork(auth.org, ref, body.count, body.name, body.region)
    return ComputerList(computers=[Computer.of(r, auth.org.name) for r in rows])
