"""Files of a computer: browse a folder, upload (streamed to the guest, as the API's upload),
download, make a folder, delete. Every call is the control plane's file verb for the session's
org."""

from __future__ import annotations

import posixpath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from ..api.routes.files import downloadable, sized
from ..api.standing import chunks_while_standing
from ..control.errors import InvalidRequestError
from .access import Plane, Reader, Writer, signed_in
from .forms import text
from .render import ConsoleRoute, fragment

router = APIRouter(prefix="/console/computers", route_class=ConsoleRoute, include_in_schema=False)
GuestPath = Annotated[str, Query(min_length=1, max_length=4096)]


def _absolute(path: str | None) -> str:
    if not path or not path.startswith("/"):
        raise InvalidRequestError("give an absolute path in the computer, like /root/notes.txt")
    return path


@router.get("/{ref}/files/list")
async def listing(ref: str, path: GuestPath, v: Reader, plane: Plane) -> Response:
    path = _absolute(path)
    entries = sorted(await plane.list_files(v.org, ref, path), key=lambda e: (not e.is_dir, e.name))
    parent = posixpath.dirname(path.rstrip("/")) or "/"
    return fragment("files_list.html", ref=ref, path=path, parent=parent, entries=entries)


@router.get("/{ref}/files/download")
async def download(
    ref: str, path: GuestPath, request: Request, v: Reader, plane: Plane
) -> Response:
    """A file's bytes; a download outlives no end of its session (cut)."""
    path = _absolute(path)
    info = downloadable(await plane.stat_file(v.org, ref, path), path)
    name = quote(posixpath.basename(path) or "file")
    headers = {
        **sized(info.size),
        "Cache-Control": "no-store",
        "Content-Disposition": f"attachment; filename*=UTF-8''{name}",
    }
    chunks = plane.read_file(v.org, ref, path, info.size)
    return StreamingResponse(
        chunks_while_standing(signed_in(request), chunks, cut=True),
        media_type="application/octet-stream",
        headers=headers,
    )


@router.put("/{ref}/files")
async def upload(ref: str, path: GuestPath, request: Request, v: Writer, plane: Plane) -> Response:
    size = await plane.put_file(v.org, ref, _absolute(path), request.stream(), None)
    return JSONResponse({"path": path, "size": size})


@router.post("/{ref}/files/mkdir")
async def make_dir(request: Request, ref: str, v: Writer, plane: Plane) -> Response:
    path = _absolute(text(await request.form(), "path"))
    await plane.make_dir(v.org, ref, path)
    return JSONResponse({"path": path})


@router.post("/{ref}/files/delete")
async def delete(request: Request, ref: str, v: Writer, plane: Plane) -> Response:
    form = await request.form()
    path = _absolute(text(form, "path"))
    await plane.remove_file(v.org, ref, path, recursive=form.get("recursive") == "on")
    return JSONResponse({"path": path})
