"""envd's plain HTTP: `GET /health` (204, or 502 for a sandbox that does not run: the only
answer the SDK's `is_running()` reads as False), `GET /files` (a file's bytes) and `POST /files`
(an `application/octet-stream` body, or `multipart/form-data` with `file` parts whose file names
are the paths when no `path` is given; gzip allowed). Errors are `{"code", "message"}`.

An upload is streamed to the guest as it arrives, as `/v1`'s file uploads are (the reason they
are outside the API's body limit, `api.limits`): the server holds a window of it at a time under
the guest agent's flow control, multipart parts one after another, and the guest's disk bounds
the whole. A file is read to its end as it is when read: its bytes are sent without a length."""

from __future__ import annotations

import collections
import posixpath
import zlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..control.errors import ControlError, InvalidRequestError
from .envd import Sandbox
from .envd_files import ensure_dirs, own
from .multipart import Event, MultipartError, PartData, PartEnd, PartReader, PartStart

MAX_UPLOAD_FILES = 100  # file parts of one multipart upload
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
    if info.type != "file":  # a device, a pipe or a socket: never ends, or never starts
        return error(400, f"path {path} is not a regular file")
    # no Content-Length: the file may grow or shrink between the stat and the read (chunked);
    # one whose stat says 0 (/proc's) read to its end, within read_file's bound
    return StreamingResponse(
        sb.plane.read_file(sb.org, sb.computer_id, path, 0 if info.size == 0 else None),
        media_type="application/octet-stream",
    )


async def inflated(chunks: AsyncIterator[bytes], most: int = MAX_INFLATED) -> AsyncIterator[bytes]:
    """A gzip body's bytes, inflated as they arrive: its members one after another (`gzip -c a
    b`, as Go's gzip reader in envd reads them), at most `most` bytes. A body that is not gzip,
    ends inside a member or inflates past `most` raises at that point, before the end of what it
    yields: the caller's write of it is then abandoned (the guest keeps its file as it was)."""
    inflater = zlib.decompressobj(wbits=31)
    total = 0
    async for chunk in chunks:
        pending = chunk
        while True:
            if inflater.eof and pending:  # the member before ended: another begins
                inflater = zlib.decompressobj(wbits=31)
            try:
                data = inflater.decompress(pending, CHUNK)
            except zlib.error as exc:
                raise InvalidRequestError(
                    f"the gzip body is not valid gzip ({exc}): the file was not written"
                ) from None
            pending = (inflater.unused_data if inflater.eof else b"") + inflater.unconsumed_tail
            total += len(data)
            if total > most:
                raise InvalidRequestError(
                    f"the gzip body inflates past the upload limit ({most} bytes): "
                    "the file was not written; upload it in parts"
                )
            if data:
                yield data
            if not pending and (inflater.eof or len(data) < CHUNK):
                break  # (a full CHUNK may leave output inside the inflater: asked for again)
    if not inflater.eof:
        raise InvalidRequestError(
            "the gzip body ended inside a member (cut short?): the file was not written; "
            "send it whole"
        )


class _Parts:
    """A multipart body's parts in order, each one's data read from the body as it is pulled."""

    def __init__(self, reader: PartReader, chunks: AsyncIterator[bytes]) -> None:
        self._reader = reader
        self._chunks = chunks
        self._pending: collections.deque[Event] = collections.deque()  # one chunk's at most
        self._read = False

    async def _event(self) -> Event | None:
        while not self._pending:
            if self._read:
                return None
            chunk = await anext(self._chunks, None)
            if chunk is None:
                self._read = True
                self._reader.close()
            else:
                self._pending.extend(self._reader.feed(chunk))
        return self._pending.popleft()

    async def next(self) -> PartStart | None:
        """The next part (what is left of the one before is skipped), None after the last."""
        while (event := await self._event()) is not None:
            if isinstance(event, PartStart):
                return event
        return None

    async def data(self) -> AsyncIterator[bytes]:
        """The current part's data, to its end."""
        while (event := await self._event()) is not None and not isinstance(event, PartEnd):
            if isinstance(event, PartData):
                yield event.data


async def _put(sb: Sandbox, path: str, source: AsyncIterator[bytes]) -> dict[str, Any]:
    made = await ensure_dirs(sb, posixpath.dirname(path))
    await sb.plane.put_file(sb.org, sb.computer_id, path, source, None)  # as envd: mode kept
    await own(sb, *made, path)
    return {"path": path, "name": posixpath.basename(path), "type": "file"}


async def _multipart(sb: Sandbox, given: str | None, parts: _Parts) -> Response:
    """envd's multipart upload: each `file` part written as it is read; a path given names the
    one file, else each part's file name is its path. What is written before an error stays."""
    written: list[dict[str, Any]] = []
    while (part := await parts.next()) is not None:
        if part.name != "file":
            continue
        target = given or part.filename
        if not target:
            return error(400, "a file part without a path")
        if len(written) == MAX_UPLOAD_FILES:
            return error(400, f"at most {MAX_UPLOAD_FILES} files in one upload")
        path = sb.path(target)
        if any(w["path"] == path for w in written):
            return error(400, f"more than one file for {path} in one upload: the first was written")
        written.append(await _put(sb, path, parts.data()))
    return JSONResponse(written)


async def upload(sb: Sandbox, request: Request) -> Response:
    given = request.query_params.get("path")
    content_type = request.headers.get("content-type", "")
    body: AsyncIterator[bytes] = request.stream()
    if request.headers.get("content-encoding", "").lower() == "gzip":
        body = inflated(body)
    if content_type.split(";")[0].strip().lower() != "multipart/form-data":
        if not given:
            return error(400, "path is required for an octet-stream upload")
        return JSONResponse([await _put(sb, sb.path(given), body)])
    try:
        return await _multipart(sb, given, _Parts(PartReader(content_type), body))
    except MultipartError as exc:
        return error(400, str(exc))
