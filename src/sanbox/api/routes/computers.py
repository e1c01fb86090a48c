"""/v1/computers: create, list, get, start, stop, restart, delete, events, console."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from ...control.create import CreateRequest
from ...control.errors import InvalidRequestError
from ...control.lifecycle import Change
from ..schemas import (
    Computer,
    ComputerCreate,
    ComputerList,
    ComputerUpdate,
    ConsoleTail,
    ErrorBody,
    EventList,
)
from ._deps import Auth, Plane

ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 422, 503, 507)
}
router = APIRouter(prefix="/v1/computers", tags=["computers"], responses=ERRORS)


def parse_labels(labels: list[str]) -> dict[str, str]:
    parsed = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequestError(f"label filter {item!r} is not key=value")
        parsed[key] = value
    return parsed


@router.post("", status_code=201, response_model=Computer)
async def create_computer(
    body: ComputerCreate,
    auth: Auth,
    plane: Plane,
    response: Response,
    wait: bool = True,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> Computer:
    fields = body.model_dump()
    fields["secrets"] = tuple((ref["name"], ref["env"]) for ref in fields["secrets"])
    req = CreateRequest(**fields)
    row = await plane.create(auth.org, req, idempotency_key, wait)
    if not wait:
        response.status_code = 202
    return Computer.of(row, auth.org.name)


@router.get("", response_model=ComputerList)
async def list_computers(
    auth: Auth,
    plane: Plane,
    state: str | None = None,
    label: Annotated[list[str], Query()] = [],  # noqa: B006
) -> ComputerList:
    rows = plane.find(auth.org, state, parse_labels(label))
    return ComputerList(
        computers=[Computer.of(r, auth.org.name, plane.unknown_reason(r)) for r in rows]
    )


@router.get("/{ref}", response_model=Computer)
async def get_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    row = plane.get(auth.org, ref)
    return Computer.of(row, auth.org.name, plane.unknown_reason(row))


@router.delete("/{ref}", response_model=Computer)
async def delete_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    return Computer.of(await plane.delete(auth.org, ref), auth.org.name)


@router.post("/{ref}/start", response_model=Computer)
async def start_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    return Computer.of(await plane.start(auth.org, ref), auth.org.name)


@router.post("/{ref}/stop", response_model=Computer)
async def stop_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    return Computer.of(await plane.stop(auth.org, ref), auth.org.name)


@router.post("/{ref}/restart", response_model=Computer)
async def restart_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    return Computer.of(await plane.restart(auth.org, ref), auth.org.name)


@router.post("/{ref}/pause", response_model=Computer)
async def pause_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    """Save memory and processes to disk and end the VM process; `resume` picks up there."""
    return Computer.of(await plane.pause(auth.org, ref), auth.org.name)


@router.post("/{ref}/resume", response_model=Computer)
async def resume_computer(ref: str, auth: Auth, plane: Plane) -> Computer:
    """Restore a paused or suspended computer; `memory` says whether memory was restored."""
    return Computer.of(await plane.resume(auth.org, ref), auth.org.name)


@router.patch("/{ref}", response_model=Computer)
async def update_computer(ref: str, body: ComputerUpdate, auth: Auth, plane: Plane) -> Computer:
    change = Change(**body.model_dump())
    return Computer.of(await plane.update(auth.org, ref, change), auth.org.name)


@router.get("/{ref}/events", response_model=EventList)
async def computer_events(ref: str, auth: Auth, plane: Plane) -> EventList:
    return EventList.model_validate({"events": plane.events(auth.org, ref)})


@router.get("/{ref}/console", response_model=ConsoleTail)
async def computer_console(
    ref: str, auth: Auth, plane: Plane, lines: Annotated[int, Query(ge=1, le=5000)] = 100
) -> ConsoleTail:
    return ConsoleTail(lines=await plane.console(auth.org, ref, lines))
