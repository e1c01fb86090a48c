"""Templates (list, build from an uploaded spec tar with the log streaming live, rebuild,
delete), pools (size, ready, set size) and secrets (names, hosts, bindings; set or replace a
value, write-only; delete). Admin pages are `admin.py`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from ..api.routes.pools import Pool
from ..api.routes.templates import LOG_TYPE, log_lines
from ..api.routes.templates import _body as read_context
from ..api.template_schemas import Template
from ..control.errors import InvalidRequestError
from ..control.pools import MAX_SIZE
from . import admin
from .access import Plane, Reader, Writer, while_signed_in
from .forms import number, text, text_list
from .render import ConsoleRoute, page

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
router.include_router(admin.router)


@router.get("/templates")
async def templates_page(v: Reader, plane: Plane) -> Response:
    own = [Template.of(r, v.org.name) for r in plane.templates(v.org)]
    builtins = [b.name for b in plane.builtin_templates()]
    pools = [Pool.of(p) for p in plane.pool_status(v.org)]
    return page(
        "templates.html", v, templates=own, builtins=builtins, pools=pools, max_pool=MAX_SIZE
    )


@router.post("/templates")
async def build(request: Request, v: Writer, plane: Plane, name: str | None = None) -> Response:
    """The body is a tar of the spec folder (the page packs a chosen folder, or sends a .tar)."""
    with plane.build_uploads.admitted(v.org.id):  # bounded before a byte is read
        context = await read_context(request)
        row, building = await plane.build_template(v.org, context, name or None)
    return JSONResponse({"id": row.id, "name": row.name, "building": building})


@router.get("/templates/{ref}/logs")
async def build_log(ref: str, request: Request, v: Reader, plane: Plane) -> Response:
    """The build log as it is written (the API's NDJSON stream, followed), until the build
    ends or the session does (its key revoked: a build can take an hour)."""
    logs = log_lines(plane, v.principal, ref, follow=True)
    return StreamingResponse(while_signed_in(request, logs), media_type=LOG_TYPE)


@router.post("/templates/{ref}/rebuild")
async def rebuild_template(ref: str, v: Writer, plane: Plane) -> Response:
    """Build again from the context the last build was given (the server keeps it)."""
    await plane.rebuild_template(v.org, ref)
    return Response(status_code=204, headers={"HX-Refresh": "true"})


@router.post("/templates/{ref}/delete")
async def delete_template(ref: str, v: Writer, plane: Plane) -> Response:
    await plane.delete_template(v.org, ref)
    return Response(status_code=204, headers={"HX-Refresh": "true"})


@router.post("/pools")
async def set_pool(request: Request, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    template, size = text(form, "template"), number(form, "size")
    if template is None or size is None:
        raise InvalidRequestError("give the template and the pool's size")
    plane.set_pool(v.org, template, size)
    return Response(status_code=204, headers={"HX-Refresh": "true"})


@router.get("/secrets")
async def secrets_page(v: Reader, plane: Plane) -> Response:
    rows = plane.secrets.find(v.org)
    bound: dict[str, list[str]] = {}
    for c in plane.find(v.org):
        for _, secret in plane.secrets.bindings(v.org, c.id):
            bound.setdefault(secret.name, []).append(c.name)
    return page("secrets.html", v, secrets=rows, bound=bound)


@router.post("/secrets")
async def put_secret(request: Request, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    name, value = text(form, "name"), form.get("value")
    if name is None or not isinstance(value, str) or not value:
        raise InvalidRequestError("give the secret's name and value")
    plane.secrets.put(v.org, name, value, text_list(form, "hosts"), text(form, "header"))
    return Response(status_code=204, headers={"HX-Refresh": "true"})


@router.post("/secrets/{name}/delete")
async def delete_secret(name: str, v: Writer, plane: Plane) -> Response:
    plane.secrets.delete(v.org, name)
    return Response(status_code=204, headers={"HX-Refresh": "true"})
