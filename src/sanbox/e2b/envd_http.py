"""envd's plain HTTP: `GET /health` (204, or 502 for a sandbox that does not run: the only
answer the SDK's `is_running()` reads as False), `GET /files` (a file's bytes) and `POST /files`
(an `application/octet-stream` body, gzip allowed, or `multipart/form-data` with `file` parts
whose file names are the paths when no `path` is given). Errors are `{"code", "message"}`."""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..control.errors import ControlError, InvalidRequestError
from .envd import Sandbox
from .envd_files import own

MAX_UPLOAD_FILES = 100
MAX_INFLATED = 64 * 2**30  # bytes a gzip upload may inflate to
CHUNK = 256 * 1024


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def control_error(exc: ControlError) -> JSONResponse:
    status = {422: 400, 409: 400}.get(exc.status, exc.status)
    return error(status, exc.message if exc.status < 500 else f"the request failed ({exc.code})")


async def download(sb: Sandbox, request: Request) -> Response:
    path = sb.path(request.query_params.get("path", ""))
    info = await sb.plane.stat_file(sb.org, sb.computer_id, path)
    if info.type == "dir":
        return error(400, f"path {path} is a directory")
    return StreamingResponse(
        sb.plane.read_file(sb.org, sb.computer_id, path),
        media_type="application/octet-stream",
        headers={"Content-Length": str(info.size)},
    )


async def _inflated(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    inflater = zlib.decompressobj(wbits=31)
    total = 0
    async for chunk in chunks:
        data = inflater.decompress(chunk, CHUNK)
        while True:
            total += len(data)
            if total > MAX_INFLATED:
                raise InvalidRequestError("the gzip body inflates past the upload limit")
            if data:
                yield data
            if not inflater.unconsumed_tail:
                break
            data = inflater.decompress(inflater.unconsumed_tail, CHUNK)
    if rest := inflater.flush():
        yield rest


async def _spooled(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(CHUNK):
        yield chunk


async def _put(sb: Sandbox, path: str, source: AsyncIterator[bytes]) -> dict[str, Any]:
    parent = posixpath.dirname(path)
    if parent and parent != "/":
        await sb.plane.make_dir(sb.org, sb.computer_id, parent)
    await sb.plane.put_file(sb.org, sb.computer_id, path, source, 0o644)
    await own(sb, path)
    return {"path": path, "name": posixpath.basename(path), "type": "file"}


async def upload(sb: Sandbox, request: Request) -> Response:
    given = request.query_params.get("path")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        if not given:
            return error(400, "path is required for an octet-stream upload")
        body: AsyncIterator[bytes] = request.stream()
        if request.headers.get("content-encoding", "").lower() == "gzip":
            body = _inflated(body)
        return JSONResponse([await _put(sb, sb.path(given), body)])
    written = []
    async with request.form(max_files=MAX_UPLOAD_FILES, max_fields=MAX_UPLOAD_FILES) as form:
        uploads = [v for k, v in form.multi_items() if k == "file" and isinstance(v, UploadFile)]
        if given and len(uploads) != 1:
            return error(400, "one file part goes with a path")
        for part in uploads:
            target = given or part.filename or ""
            if not target:
                return error(400, "a file part without a path")
            written.append(await _put(sb, sb.path(target), _spooled(part)))
    return JSONResponse(written)
