"""The Computer page: its state and the honest outcome of its last start or resume, the verbs
(stop, start, restart, pause, resume, fork, snapshot, delete), events and the console log tail,
the allowlist with the recent denials, published ports, bound secrets (names and hosts), its
snapshots and an SSH config snippet. Terminals are `terminal.py`, files `files.py`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ..api.ports.access import VIEW_TOKEN_PARAM
from ..api.ports.view_link import LinkTarget
from ..api.published import view_link_signer
from ..api.settings import ServerSettings
from ..control.errors import InvalidRequestError, NotFoundError
from ..control.network import publication
from .access import Plane, Reader, Viewer, Writer
from .charts import computer_charts
from .computers import view
from .forms import number, text, text_list
from .render import ConsoleRoute, fragment, page

router = APIRouter(prefix="/console/computers", route_class=ConsoleRoute, include_in_schema=False)
VERBS = ("start", "stop", "restart", "pause", "resume")
STARTS = (
    "computer.running",
    "computer.resumed",
    "computer.woken",
)  # what its last start or resume did
EVENTS_SHOWN = 50
DENIALS_SHOWN = 20
CONSOLE_LINES = 60


def _settings(request: Request) -> ServerSettings:
    found: ServerSettings = request.app.state.settings
    return found


def _ports(request: Request, v: Viewer, c: dict[str, Any]) -> list[dict[str, Any]]:
    settings = _settings(request)
    return [
        {
            "port": p["port"],
            "public": p["public"],
            "url": settings.port_url(int(p["port"]), c["name"], v.org.name),
        }
        for p in c["ports"]
    ]


@router.get("/{ref}")
async def computer_page(request: Request, ref: str, v: Reader, plane: Plane) -> Response:
    row = plane.get(v.org, ref)
    c = view(row, v.org.name, plane.unknown_reason(row))
    events = plane.events(v.org, row.id)
    denials = [e for e in events if e["type"] == "network.denied"][-DENIALS_SHOWN:]
    starts = [e for e in events if e["type"] in STARTS]
    bindings = plane.secrets.bindings(v.org, row.id)
    snapshots = [s for s in plane.snapshots(v.org) if s.computer_id == row.id]
    return page(
        "computer.html",
        v,
        c=c,
        events=events[-EVENTS_SHOWN:][::-1],
        denials=denials[::-1],
        console=await plane.console(v.org, row.id, CONSOLE_LINES),
        ports=_ports(request, v, c),
        bindings=bindings,
        snapshots=snapshots,
        server=_settings(request).url,
        last_start=starts[-1] if starts else None,
        charts=computer_charts(plane.usage.metrics(v.org, row.id)[1], row.memory_mib),
    )


@router.post("/{ref}/do/{verb}")
async def act(ref: str, verb: str, v: Writer, plane: Plane) -> Response:
    if verb not in VERBS:
        raise NotFoundError(f"no action {verb!r}", "not_found")
    row = await getattr(plane, verb)(v.org, ref)
    return fragment("computer_state.html", c=view(row, v.org.name))


@router.post("/{ref}/delete")
async def delete(ref: str, v: Writer, plane: Plane) -> Response:
    await plane.delete(v.org, ref)
    return Response(status_code=204, headers={"HX-Redirect": "/console/computers"})


@router.post("/{ref}/fork")
async def fork(request: Request, ref: str, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    rows = await plane.fork(v.org, ref, number(form, "count") or 1, text(form, "name"))
    return Response(status_code=204, headers={"HX-Redirect": f"/console/computers/{rows[0].id}"})


@router.post("/{ref}/snapshot")
async def snapshot(request: Request, ref: str, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    row = await plane.snapshot(v.org, ref, form.get("memory") == "on", text(form, "name"))
    return fragment("flash.html", message=f"snapshot {row.name or row.id} taken")


@router.post("/{ref}/network")
async def set_allow(request: Request, ref: str, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    row, closed = await plane.set_allow(v.org, ref, text_list(form, "allow"))
    said = f"allowlist saved: {', '.join(row.allow) or 'nothing goes out'}"
    if closed:
        said += f"; {closed} open connection(s) no longer allowed were closed"
    return fragment("flash.html", message=said)


@router.post("/{ref}/ports")
async def publish(request: Request, ref: str, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    port = number(form, "port")
    if port is None or not 1 <= port <= 65535:
        raise InvalidRequestError("the port is a number from 1 to 65535")
    row = plane.publish(v.org, ref, port, form.get("public") == "on")
    c = view(row, v.org.name)
    return fragment("ports.html", c=c, ports=_ports(request, v, c))


@router.post("/{ref}/ports/{port}/unpublish")
async def unpublish(request: Request, ref: str, port: int, v: Writer, plane: Plane) -> Response:
    row = plane.unpublish(v.org, ref, port)
    c = view(row, v.org.name)
    return fragment("ports.html", c=c, ports=_ports(request, v, c))


@router.post("/{ref}/ports/{port}/open")
async def open_port(request: Request, ref: str, port: int, v: Writer, plane: Plane) -> Response:
    """The URL to open: a public port's own, else a view link (`/v1/.../view-link`'s kind)."""
    row = plane.get(v.org, ref)
    settings = _settings(request)
    published = [p for p in row.ports if p["port"] == port]
    if not published:
        raise NotFoundError(f"port {port} of {row.name} is not published", "port_not_found")
    url = settings.port_url(port, row.name, v.org.name)
    if not published[0]["public"]:
        signer = view_link_signer(settings.layout.secret_key)
        target = LinkTarget(row.id, row.org_id, port, publication(row, port))
        token, _ = signer.mint(target, v.principal.key.id, 600)
        url = f"{url}?{urlencode({VIEW_TOKEN_PARAM: token})}"
    return JSONResponse({"url": url}, headers={"Cache-Control": "no-store"})
