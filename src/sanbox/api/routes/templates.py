"""/v1/templates: the built-in templates and the ones an org builds from a spec. A build is
POSTed as a tar of the spec (`sanbox.toml`) and the files it copies; it runs in the background
and its log (JSON lines) is followed at /v1/templates/{ref}/logs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ...control import build_log
from ...control.computers import Computers
from ...control.errors import PayloadTooLargeError
from ...control.keys import Principal
from ...templates.context import MAX_TAR_BYTES
from ..standing import chunks_while_standing, key_stands
from ..template_schemas import BuildCachePruned, Template, TemplateBuild, TemplateList
from ._deps import Auth, Plane
from .computers import ERRORS

router = APIRouter(prefix="/v1", tags=["templates"], responses=ERRORS)

Region = Annotated[
    str | None, Query(description="the region of the build meant (a template is built per region)")
]
LOG_POLL = 0.2  # seconds between reads of a followed build log
LOG_TYPE = "application/x-ndjson"
MAX_CONTEXT = MAX_TAR_BYTES  # the tar: its files, headers and padding


def builtins(plane: Computers) -> list[Template]:
    return [
        Template(name=b.name, builtin=True, allow=b.allow, idle_timeout=b.idle_timeout)
        for b in plane.builtin_templates()
    ]


async def _body(request: Request) -> bytes:
    """The context tar, refused past MAX_CONTEXT (this route is exempt from the general limit)."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_CONTEXT:
            raise PayloadTooLargeError(f"the build context is over {MAX_CONTEXT // 2**20} MiB")
    return bytes(data)


@router.post(
    "/templates",
    response_model=TemplateBuild,
    status_code=202,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def build_template(
    request: Request,
    auth: Auth,
    plane: Plane,
    name: Annotated[str | None, Query(description="the template's name (else the spec's)")] = None,
    region: Region = None,
) -> JSONResponse:
    """Build a template from a tar of its spec (`sanbox.toml`) and the files its steps copy, in
    a region (default: the org's home region once fleet hosts have joined). 202: a build runs
    (follow its log); 200: nothing changed since the last build there."""
    with plane.build_uploads.admitted(auth.org.id):  # bounded before a byte is read
        context = await _body(request)
        row, building = await plane.build_template(auth.org, context, name, region or None)
    body = TemplateBuild(template=Template.of(row, auth.org.name), building=building)
    return JSONResponse(body.model_dump(mode="json"), status_code=202 if building else 200)


@router.post("/templates/{ref}/rebuild", response_model=TemplateBuild, status_code=202)
async def rebuild_template(
    ref: str, auth: Auth, plane: Plane, region: Region = None
) -> JSONResponse:
    """Build the template again from the spec and files its last build was given (kept by the
    server), without uploading them; in another region, that builds it there. 202: a build runs;
    200: nothing changed since; 409 `no_build_context` for a template built before contexts
    were kept."""
    with plane.build_uploads.admitted(auth.org.id):  # its context is read whole, as an upload
        row, building = await plane.rebuild_template(auth.org, ref, region or None)
    body = TemplateBuild(template=Template.of(row, auth.org.name), building=building)
    return JSONResponse(body.model_dump(mode="json"), status_code=202 if building else 200)


@router.get("/templates", response_model=TemplateList)
async def list_templates(auth: Auth, plane: Plane) -> TemplateList:
    own = [Template.of(r, auth.org.name) for r in plane.templates(auth.org)]
    return TemplateList(templates=builtins(plane) + own)


@router.get("/templates/{ref}", response_model=Template)
async def get_template(ref: str, auth: Auth, plane: Plane, region: Region = None) -> Template:
    """A template: its build in `region`, else the only one or the one in the org's home region
    (409 `region_required` when that does not say which)."""
    for t in builtins(plane):
        if t.name == ref:
            return t
    return Template.of(plane.get_template(auth.org, ref, region), auth.org.name)


@router.delete("/templates/{ref}", response_model=Template)
async def delete_template(ref: str, auth: Auth, plane: Plane, region: Region = None) -> Template:
    """Delete a template (its build in `region`); computers made from it keep working."""
    return Template.of(await plane.delete_template(auth.org, ref, region), auth.org.name)


@router.post("/build-cache/prune", response_model=BuildCachePruned)
async def prune_build_cache(auth: Auth, plane: Plane) -> BuildCachePruned:
    """Delete the org's cached build steps that none of its templates stands on (those of older
    versions of a spec, those of deleted templates). 409 `template_building` while a build runs."""
    pruned = await plane.prune_build_cache(auth.org)
    return BuildCachePruned(
        removed_steps=pruned.removed_steps,
        kept_steps=pruned.kept_steps,
        freed_bytes=pruned.freed_bytes,
    )


@router.get("/templates/{ref}/logs", response_class=StreamingResponse)
async def template_logs(
    request: Request,
    ref: str,
    auth: Auth,
    plane: Plane,
    follow: Annotated[bool, Query(description="keep streaming until the build ends")] = False,
    region: Region = None,
) -> StreamingResponse:
    """The last build's log, one JSON object per line (`step`, `output`, `done`); followed, while
    the key stands (a build can take hours)."""
    lines = log_lines(plane, auth, ref, follow, region)
    return StreamingResponse(chunks_while_standing(key_stands(request), lines), media_type=LOG_TYPE)


def log_lines(
    plane: Computers, auth: Principal, ref: str, follow: bool, region: str | None = None
) -> AsyncIterator[bytes]:
    """The last build's log as NDJSON lines (the template looked up now: an unknown one raises
    here, before a stream is answered)."""
    row = plane.get_template(auth.org, ref, region)
    path = plane.template_log(row)

    async def lines() -> AsyncIterator[bytes]:
        offset = 0
        while True:
            records, offset = await asyncio.to_thread(build_log.read, path, offset)
            for record in records:
                yield (build_log.json_line(record)).encode()
                if record.get("type") == "done":
                    return
            if not follow or plane.get_template(auth.org, row.id).state != "building":
                if not records:
                    return
                continue
            await asyncio.sleep(LOG_POLL)

    return lines()
