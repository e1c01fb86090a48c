"""E2B's fork and snapshot routes (`sbx.fork()`, `sbx.create_snapshot()`,
`Sandbox.list_snapshots()`, `Sandbox.delete_snapshot()`), under /e2b with the control API's other
routes (api.py).

A snapshot's E2B id is its Sanbox id (`snp_…`) and its one name, if any, its name. The list is
every ready snapshot of the org, however it was taken (`sanbox snapshot` too): each is one
`templateID` may name. E2B deletes a snapshot through its template route: `DELETE
/templates/{id or name}` deletes the org's snapshot it names; a name that is a template's is
refused (Sanbox's templates are not managed through E2B's API), anything else is 404."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..control import templates
from ..control.computers import Computers
from ..control.errors import InvalidRequestError
from ..control.lifecycle import Change
from ..control.names import check_name
from ..store.models import SnapshotRow
from . import identity
from .routing import E2bRoute, principal, sandbox_row
from .shapes import MAX_TIMEOUT, lifetime_from_now, page_limit, page_offset, page_token, sandbox

SNAPSHOTS_LIMIT = 100  # a page of `GET /snapshots` at most (the SDK asks for 100)

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


def _snapshot_info(snap: SnapshotRow) -> dict[str, object]:
    return {"snapshotID": snap.id, "names": [snap.name] if snap.name else []}


@router.get("/snapshots")
async def list_snapshots(request: Request) -> JSONResponse:
    """The org's ready snapshots, oldest first, `limit` a page (`x-next-token` for the next):
    those of one sandbox (`sandboxID`), or those a `name` names (by id or name)."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    q = request.query_params
    source = q.get("sandboxID")
    computer = identity.computer_id(source) if source else None
    name = q.get("name")
    rows = [
        snap
        for snap in plane.snapshots(p.org)
        if (not source or snap.computer_id == computer)
        and (not name or name in (snap.id, snap.name))
    ]
    limit = page_limit(q.get("limit"), SNAPSHOTS_LIMIT)
    start = page_offset(q.get("nextToken"))
    page = rows[start : start + limit]
    headers = {"x-next-token": page_token(start + limit)} if start + limit < len(rows) else {}
    return JSONResponse([_snapshot_info(snap) for snap in page], headers=headers)


@router.delete("/templates/{ref}", status_code=204)
async def delete_snapshot(ref: str, request: Request) -> Response:
    """`Sandbox.delete_snapshot()`: the org's snapshot by id (`snp_…`), or by name when no
    template has that name (as `templateID` reads it); 404 if none (the SDK's False). A template
    is not deleted here: 400, saying how."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    if not ref.startswith("snp_") and (
        templates.builtin(ref) or any(t.name == ref or t.id == ref for t in plane.templates(p.org))
    ):
        raise InvalidRequestError(
            f"{ref[:80]!r} is a template, not a snapshot: Sanbox does not delete templates "
            f"through E2B's API (`sanbox template rm {ref[:80]}`)",
            "not_offered",
        )
    await plane.delete_snapshot(p.org, ref)  # by id or name; `snapshot_not_found`: 404
    return Response(status_code=204)
