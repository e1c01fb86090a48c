"""/v1/computers/{ref}/files: upload and download streamed, list, stat, delete, mkdir."""

from __future__ import annotations

import stat as statmod
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from ...control.errors import InvalidRequestError
from ...control.guest import guest_call
from ...host.agent import FileInfo
from ..schemas import FileEntry, FileList, FileWritten, MkdirRequest
from ._deps import Auth, Service
from .computers import ERRORS

router = APIRouter(prefix="/v1/computers", tags=["files"], responses=ERRORS)
PathQuery = Annotated[str, Query(min_length=1, max_length=4096, description="absolute guest path")]


def entry(info: FileInfo) -> FileEntry:
    kinds: dict[str, Literal["file", "dir", "symlink", "other"]] = {
        "file": "file", "dir": "dir", "symlink": "symlink",
    }  # fmt: skip
    kind = kinds.get(info.type, "other")
    return FileEntry(
        name=info.name, path=info.path, type=kind, size=info.size,
        mode=statmod.S_IMODE(info.mode), mtime=info.mtime,
    )  # fmt: skip


@router.put("/{ref}/files", response_model=FileWritten)
async def upload(
    ref: str, path: PathQuery, request: Request, auth: Auth, svc: Service, mode: str = "0644"
) -> FileWritten:
    try:
        file_mode = int(mode, 8)
    except ValueError:
        raise InvalidRequestError(f"mode {mode!r} is not octal (like 0644)") from None
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        size = await client.files.put(path, request.stream(), mode=file_mode)
    return FileWritten(path=path, size=size)


@router.get("/{ref}/files", response_class=StreamingResponse)
async def download(ref: str, path: PathQuery, auth: Auth, svc: Service) -> StreamingResponse:
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        info = await client.files.stat(path)
        if info.type == "dir":
            raise InvalidRequestError(f"{path} is a directory: list it instead", "is_a_directory")

    async def body() -> AsyncIterator[bytes]:
        async with guest_call(svc, auth.org, ref) as machine:
            client = await machine.client()
            async for chunk in client.files.get(path):
                yield chunk

    return StreamingResponse(
        body(), media_type="application/octet-stream",
        headers={"Content-Length": str(info.size)},
    )  # fmt: skip


@router.get("/{ref}/files/list", response_model=FileList)
async def list_dir(ref: str, path: PathQuery, auth: Auth, svc: Service) -> FileList:
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        infos = await client.files.list(path)
    return FileList(entries=[entry(i) for i in infos])


@router.get("/{ref}/files/stat", response_model=FileEntry)
async def stat(ref: str, path: PathQuery, auth: Auth, svc: Service) -> FileEntry:
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        return entry(await client.files.stat(path))


@router.delete("/{ref}/files", status_code=204)
async def remove(
    ref: str, path: PathQuery, auth: Auth, svc: Service, recursive: bool = False
) -> Response:
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        await client.files.remove(path, recursive=recursive)
    return Response(status_code=204)


@router.post("/{ref}/files/mkdir", status_code=204)
async def mkdir(ref: str, body: MkdirRequest, auth: Auth, svc: Service) -> Response:
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        await client.files.mkdir(body.path, parents=True)
    return Response(status_code=204)
