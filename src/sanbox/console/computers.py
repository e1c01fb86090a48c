"""The Computers page: the org's computers with their state kept live by server-sent events (one
stream per page, fed by the control plane's event bus, each event re-read as the row it changed),
filtered and searched, and the create form."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse

from ..api.schemas import Computer
from ..control.create import CreateRequest
from ..control.errors import InvalidRequestError, NotFoundError
from ..store.models import ComputerRow
from .access import LoginRequiredError, Plane, Reader, Viewer, Writer, viewer
from .forms import number, pairs, text, text_list
from .render import ConsoleRoute, fragment, html, page

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
KEEPALIVE = 15.0  # seconds
RECHECK = (
    1.0  # seconds: the session's key is checked again at most this often, and at each keepalive
)


def view(row: ComputerRow, org: str, unknown: str | None = None) -> dict[str, Any]:
    return Computer.of(row, org, unknown).model_dump()


def matches(c: dict[str, Any], q: str) -> bool:
    if not q:
        return True
    words = [c["name"], c["id"], c["template"], *(f"{k}={v}" for k, v in c["labels"].items())]
    return any(q.lower() in w.lower() for w in words)


@router.get("")
async def home() -> Response:
    return RedirectResponse("/console/computers", status_code=303)


@router.get("/computers")
async def computers_page(v: Reader, plane: Plane, q: str = "", state: str = "") -> Response:
    rows = [view(r, v.org.name, plane.unknown_reason(r)) for r in plane.find(v.org, state or None)]
    shown = [c for c in rows if matches(c, q)]
    names = [t.name for t in plane.builtin_templates()]
    names += [t.name for t in plane.templates(v.org) if t.state == "ready"]
    snaps = [s.name or s.id for s in plane.snapshots(v.org)]
    return page(
        "computers.html",
        v,
        computers=shown,
        total=len(rows),
        q=q,
        state=state,
        templates=names,
        snapshots=snaps,
    )


def _row_event(plane: Plane, v: Viewer, item: dict[str, Any], q: str) -> str:
    computer_id = item["computer_id"]
    try:
        c = view(plane.get(v.org, computer_id), v.org.name)
    except NotFoundError:
        c = None
    payload = {
        "id": computer_id,
        "html": html("computer_row.html", c=c) if c and matches(c, q) else "",
        "state": c["state"] if c else "deleted",
    }
    if c is not None:
        payload["head"] = html("computer_state.html", c=c)
    payload["event"] = {k: item.get(k) for k in ("type", "message", "created_at")}
    return f"event: row\ndata: {json.dumps(payload)}\n\n"


@router.get("/computers/stream")
async def computers_stream(request: Request, v: Reader, plane: Plane, q: str = "") -> Response:
    """`row` events: a computer's new row (empty: gone or filtered out) and state header;
    `logout` when the session ends (its key revoked or expired), then the stream closes."""

    async def stream() -> AsyncIterator[str]:
        async with plane.subscribe(v.org) as queue:
            yield ": open\n\n"
            checked = time.monotonic()
            while not await request.is_disconnected():
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        item = await queue.get()
                except TimeoutError:
                    item = None
                if item is None or time.monotonic() - checked >= RECHECK:
                    checked = time.monotonic()
                    try:  # the key may have been revoked meanwhile (not counted as a request)
                        viewer(request, take=False)
                    except LoginRequiredError:
                        yield "event: logout\ndata: {}\n\n"
                        return
                if item is None:
                    yield ": keepalive\n\n"
                elif item.get("computer_id"):
                    yield _row_event(plane, v, item, q)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


@router.post("/computers")
async def create(request: Request, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    source = text(form, "source") or "template"
    req = CreateRequest(
        template=text(form, "template") if source == "template" else None,
        from_snapshot=text(form, "snapshot") if source == "snapshot" else None,
        name=text(form, "name"),
        vcpus=number(form, "vcpus"),
        memory_mib=number(form, "memory_mib"),
        disk_gib=number(form, "disk_gib"),
        idle_timeout=number(form, "idle_timeout"),
        allow=tuple(text_list(form, "allow")) if text(form, "allow") is not None else None,
        env=pairs(form, "env"),
        labels=pairs(form, "labels"),
    )
    if source == "snapshot" and req.from_snapshot is None:
        raise InvalidRequestError("choose the snapshot to create the computer from")
    row = await plane.create(v.org, req, None, wait=False)
    return fragment("computer_row.html", c=view(row, v.org.name))
