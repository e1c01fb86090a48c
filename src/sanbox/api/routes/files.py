"""/v1/computers/{ref}/files: upload and download streamed, list, stat, delete, mkdir."""

from __future__ import annotations

import stat as statmod
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from ...control.errors import InvalidRequestError
from ...control.guest import FileInfo
from ..schemas import FileEntry, FileList, FileWritten, MkdirRequest
from ..standing import chunks_while_standing, key_stands
from ._deps import Auth, Plane
from .computers import ERRORS

router = APIRouter(prefix="/v1/computers", tags=["files"], responses=ERRORS)
PathQuery = Annotated[str, Query(min_length=1, max_length=4096, description="absolute guest path")]


def entry(info: FileInfo) -> FileEntry:
    kinds: dict[str, Literal["file", "dir", "symlink", "other"]] = {
        "file": "file",
        "dir": "dir",
        "symlink": "symlink",
    }
    kind = kinds.get(info.type, "other")
    return FileEntry(
        name=info.name,
        path=info.path,
        type=kind,
        size=info.size,
        mode=statmod.S_IMODE(info.mode),
        mtime=info.mtime,
    )


@router.put("/{ref}/files", response_model=FileWritten)
async def upload(
    ref: str,
    path: PathQuery,
    request: Request,
    auth: Auth,
    plane: Plane,
    mode: Annotated[
        str | None, Query(description="octal; none: a file that is there keeps its mode and owner")
    ] = None,
) -> FileWritten:
    try:
        file_mode = None if mode is None else int(mode, 8)
    except ValueError:
        raise InvalidRequestError(f"mode {mode!r} is not octal (like 0644)") from None
    size = await plane.put_file(auth.org, ref, path, request.stream(), file_mode)
    return FileWritten(path=path, size=size)


@router.get("/{ref}/files", response_class=StreamingResponse)
async def download(
    ref: str,
    path: PathQuery,
    request: Request,
    auth: Auth,
    plane: Plane,
    max_bytes: Annotated[
        int | None,
        Query(
            ge=0,
            description="send the file's first bytes, this many at most (head -c), whatever "
            "the file has become since its stat: a client that keeps the answer in memory "
            "bounds it; asking one byte more than it wants tells it the file is bigger",
        ),
    ] = None,
) -> StreamingResponse:
    """A file's bytes; a download outlives no revocation or expiry of its key (cut)."""
    info = downloadable(await plane.stat_file(auth.org, ref, path), path)
    chunks = plane.read_file(auth.org, ref, path, info.size, max_bytes)
    length = info.size if max_bytes is None else min(info.size, max_bytes)
    return StreamingResponse(
        chunks_while_standing(key_stands(request), chunks, cut=True),
        media_type="application/octet-stream",
        headers=sized(length),
    )


def downloadable(info: FileInfo, path: str) -> FileInfo:
    """`info` if its file can be downloaded: a regular file (a folder is listed, a device, pipe
    or socket never ends or never starts), else InvalidRequestError."""
    if info.type == "dir":
        raise InvalidRequestError(f"{path} is a directory: list it instead", "is_a_directory")
    if info.type != "file":
        raise InvalidRequestError(
            f"{path} is not a regular file (a device, a pipe or a socket): read it with a command",
            "not_a_file",
        )
    return info


def sized(size: int) -> dict[str, str]:
    """A download's length as its stat said (its bytes are held to it: `read_file`); none for a
    file whose stat says 0 (a /proc file: read to its end, sent chunked)."""
    return {"Content-Length": str(size)} if size else {}


@router.get("/{ref}/files/list", response_model=FileList)
async def list_dir(ref: str, path: PathQuery, auth: Auth, plane: Plane) -> FileList:
    infos = await plane.list_files(auth.org, ref, path)
    return FileList(entries=[entry(i) for i in infos])


@router.get("/{ref}/files/stat", response_model=FileEntry)
async def stat(ref: str, path: PathQuery, auth: Auth, plane: Plane) -> FileEntry:
    return entry(await plane.stat_file(auth.org, ref, path))


@router.delete("/{ref}/files", status_code=204)
async def remove(
    ref: str, path: PathQuery, auth: Auth, plane: Plane, recursive: bool = False
) -> Response:
    await plane.remove_file(auth.org, ref, path, recursive)
    return Response(status_code=204)


@router.post("/{ref}/files/mkdir", status_code=204)
async def mkdir(ref: str, body: MkdirRequest, auth: Auth, plane: Plane) -> Response:
    await plane.make_dir(auth.org, ref, body.path)
    return Response(status_code=204)
