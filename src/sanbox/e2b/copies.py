"""E2B's fork and snapshot routes (`sbx.fork()`, `sbx.create_snapshot()`), under /e2b with the
control API's other routes (api.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..control.computers import Computers
from ..control.lifecycle import Change
from ..control.names import check_name
from .routing import E2bRoute, principal, sandbox_row
from .shapes import MAX_TIMEOUT, lifetime_from_now, sandbox

router = APIRouter(prefix="/e2b", route_class=E2bRoute, include_in_schema=False)


class ForkBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int = Field(15, ge=0, le=MAX_TIMEOUT)
    count: int = Field(1, ge=1, le=16)


@router.post("/sandboxes/{sandbox_id}/fork", status_code=201)
async def fork(sandbox_id: str, body: ForkBody, request: Request) -> JSONResponse:
    """201 with a result per fork, as E2B answers. Sanbox forks all or none: a fork that fails
    made none, and is answered as E2B answers a request that made none, by its error's status
    (the SDK raises it); E2B's per-fork errors never occur."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    children = await plane.fork(p.org, row.id, body.count)
    out = []
    for child in children:
        child = await plane.update(
            p.org,
            child.id,
            Change(lifetime=lifetime_from_now(child, body.timeout), on_lifetime="delete"),
        )
        out.append({"sandbox": sandbox(request, child)})
    return JSONResponse(out, status_code=201)


class SnapshotBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str | None = None
    memory: bool = True  # False: `mode="filesystem"`, computers of it boot on its disk


@router.post("/sandboxes/{sandbox_id}/snapshots", status_code=201)
async def snapshot(
    sandbox_id: str, request: Request, body: SnapshotBody | None = None
) -> JSONResponse:
    """A snapshot, with memory unless asked for the filesystem only. A name, as E2B's, moves
    to the newest snapshot given it (a create by that name gets it; the older keeps its id); it
    is checked before anything is taken."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    body = body or SnapshotBody()
    if body.name is not None:
        check_name(body.name, "snapshot")
    snap = await plane.snapshot(p.org, row.id, memory=body.memory)
    if body.name is not None:
        snap = plane.give_snapshot_name(p.org, snap.id, body.name)
    names = [snap.name] if snap.name else []
    return JSONResponse({"snapshotID": snap.id, "names": names}, status_code=201)
