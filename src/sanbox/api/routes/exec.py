"""/v1/computers/{ref}/exec: run to completion, or a WebSocket that streams stdin, stdout, stderr
and signals and serves PTY sessions with resize."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import signal
from collections.abc import Callable, Iterator

from fastapi import APIRouter, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse

from ...control.computers import Computers
from ...control.errors import ControlError
from ...control.guest import (
    CommandNotFoundError,
    ExecProcess,
    ExecResult,
    Exit,
    PtySession,
    Stderr,
    Stdout,
)
from ...tasks import cancel_and_wait
from .. import exec_protocol as wire
from ..auth import Principal, authenticate
from ..exec_schemas import ExecRequest, ExecResponse
from ..settings import ServerSettings
from ..standing import KEY_LAPSED, key_stands, while_standing
from ._deps import Auth, Plane
from ._ws import close_with_control_error, close_with_error, receive_text
from .computers import ERRORS

router = APIRouter(prefix="/v1/computers", tags=["exec"], responses=ERRORS)
# output up to this answers in one piece; a streamed body's pieces are each rendered in a worker
# thread (~0.9 ms of an exec of `true` here)
SMALL_OUTPUT = 64 * 1024


@router.post("/{ref}/exec", response_model=ExecResponse)
async def exec_command(
    ref: str, body: ExecRequest, request: Request, auth: Auth, plane: Plane
) -> Response:
    """Run a command to completion, its input given as text (`stdin`) or as bytes
    (`stdin_base64`). Each output stream keeps its first bytes up to `max_output_bytes` (at most
    the server's limit); the command's further output is drained and dropped, and
    `stdout_truncated`/`stderr_truncated` say so."""
    settings: ServerSettings = request.app.state.settings
    limit = settings.exec_max_output
    if body.max_output_bytes is not None:
        limit = min(limit, body.max_output_bytes)
    result = await plane.exec(
        auth.org,
        ref,
        body.cmd,
        env=body.env,
        cwd=body.cwd,
        user=body.user,
        stdin=body.input(),
        timeout=body.timeout,
        max_output=limit,
    )
    if len(result.stdout) + len(result.stderr) <= SMALL_OUTPUT:  # at once: no thread hop a piece
        return Response(b"".join(json_chunks(result)), media_type="application/json")
    return StreamingResponse(json_chunks(result), media_type="application/json")


def json_chunks(result: ExecResult, piece: int = 64 * 1024) -> Iterator[bytes]:
    """`ExecResponse` as JSON, rendered a piece at a time. The output is held once, as the bytes
    the agent sent, never as a whole decoded and escaped copy (a NUL byte is 6 bytes of JSON)."""
    head = ExecResponse(
        exit_code=result.exit_code,
        stdout="",
        stderr="",
        signal=result.signal,
        timed_out=result.timed_out,
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
    ).model_dump(exclude={"stdout", "stderr"})
    yield json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"stdout":"'
    yield from _json_string_body(result.stdout, piece)
    yield b'","stderr":"'
    yield from _json_string_body(result.stderr, piece)
    yield b'"}'


def _json_string_body(data: bytes, piece: int) -> Iterator[bytes]:
    """`data` decoded as UTF-8 (errors replaced, as `bytes.decode` does) and escaped as the
    inside of a JSON string, a piece at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    view = memoryview(data)
    for start in range(0, len(data), piece):
        if text := decoder.decode(view[start : start + piece]):
            yield json.dumps(text, ensure_ascii=False)[1:-1].encode()
    if text := decoder.decode(b"", final=True):
        yield json.dumps(text, ensure_ascii=False)[1:-1].encode()


async def _pump_client(ws: WebSocket, proc: ExecProcess | PtySession) -> None:
    """Client -> guest: stdin, eof, signals, resize. A message that is not one of them raises
    `ValidationError` (the session ends with a `validation_error`)."""
    while True:
        msg = wire.INPUT.validate_json(await receive_text(ws))
        if isinstance(msg, wire.ExecStdin):
            if isinstance(proc, PtySession):
                await proc.write(msg.raw())
            else:
                await proc.write_stdin(msg.raw())
        elif isinstance(msg, wire.ExecEof) and isinstance(proc, ExecProcess):
            await proc.close_stdin()
        elif isinstance(msg, wire.ExecSignal):
            await proc.signal(msg.signal)
        elif isinstance(msg, wire.ExecResize) and isinstance(proc, PtySession):
            await proc.resize(msg.rows, msg.cols)


async def _pump_guest(ws: WebSocket, proc: ExecProcess | PtySession) -> str:
    """Guest -> client: output; returns the exit message."""
    if isinstance(proc, PtySession):
        while chunk := await proc.read():
            await ws.send_text(wire.stdout(chunk))
        return wire.exit_(await proc.wait())
    async for ev in proc.events():
        if isinstance(ev, Stdout):
            await ws.send_text(wire.stdout(ev.data))
        elif isinstance(ev, Stderr):
            await ws.send_text(wire.stderr(ev.data))
        elif isinstance(ev, Exit):
            return wire.exit_(ev.exit_code, ev.signal, ev.timed_out)
    raise ControlError("the command's stream ended without an exit status")


@router.websocket("/{ref}/exec/stream")
async def exec_stream(ws: WebSocket, ref: str) -> None:
    await ws.accept()
    if not await while_standing(key_stands(ws), serve_stream(ws, ref, authenticate)):
        await close_with_error(ws, "unauthorized", KEY_LAPSED)


async def serve_stream(ws: WebSocket, ref: str, who: Callable[[WebSocket], Principal]) -> None:
    """The exec protocol on an accepted WebSocket, for the principal `who` finds (the API's
    key, the console's session): a `ControlError` from it closes the socket with the error."""
    plane: Computers = ws.app.state.computers
    try:
        auth = who(ws)
        req = wire.START.validate_json(await receive_text(ws))
        async with contextlib.AsyncExitStack() as stack:
            proc: ExecProcess | PtySession
            if req.pty:
                proc = await stack.enter_async_context(
                    plane.pty(
                        auth.org,
                        ref,
                        req.cmd,
                        rows=req.rows,
                        cols=req.cols,
                        env=req.env or None,
                        cwd=req.cwd,
                        user=req.user,
                    )
                )
            else:
                if req.cmd is None:
                    raise ValueError("cmd is required without pty")
                try:
                    proc = await stack.enter_async_context(
                        plane.exec_stream(
                            auth.org,
                            ref,
                            req.cmd,
                            env=req.env or None,
                            cwd=req.cwd,
                            user=req.user,
                            timeout=req.timeout,
                        )
                    )
                except CommandNotFoundError as exc:
                    await ws.send_text(wire.stderr((exc.message + "\n").encode()))
                    await ws.send_text(wire.exit_(127))
                    await ws.close()
                    return
            guest = asyncio.ensure_future(_pump_guest(ws, proc))
            reader = asyncio.ensure_future(_pump_client(ws, proc))
            try:
                await asyncio.wait({guest, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not guest.done():  # the client went away (or broke the protocol): end it
                    await proc.signal(signal.SIGKILL)
                    if isinstance(broken := reader.exception(), ValueError):
                        raise broken  # a message that is not the protocol's
                    return
                final = guest.result()
            finally:
                for task in (guest, reader):
                    await cancel_and_wait(task, (Exception,))
            await ws.send_text(final)
            await ws.close()
    except WebSocketDisconnect:
        return
    except ControlError as exc:
        await close_with_control_error(ws, exc)
    except ValueError as exc:  # pydantic's ValidationError too
        await close_with_error(ws, "validation_error", f"bad message: {wire.explain(exc)}")
