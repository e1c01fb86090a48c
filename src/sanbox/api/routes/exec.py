"""/v1/computers/{ref}/exec: run to completion, or a WebSocket that streams stdin, stdout, stderr
and signals and serves PTY sessions with resize."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ...control.errors import ControlError
from ...control.guest import guest_call
from ...host.agent import CommandNotFoundError, Exit, PtySession, Stderr, Stdout
from ...host.agent.process import ExecProcess
from ..auth import authenticate, bearer_token
from ..schemas import ExecRequest, ExecResponse
from ._deps import Auth, Service
from .computers import ERRORS

router = APIRouter(prefix="/v1/computers", tags=["exec"], responses=ERRORS)
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL,
           "SIGHUP": signal.SIGHUP}  # fmt: skip


@router.post("/{ref}/exec", response_model=ExecResponse)
async def exec_command(ref: str, body: ExecRequest, auth: Auth, svc: Service) -> ExecResponse:
    async with guest_call(svc, auth.org, ref) as machine:
        client = await machine.client()
        stdin = body.stdin.encode() if body.stdin is not None else None
        try:
            result = await client.exec(
                body.cmd, env=body.env or None, cwd=body.cwd, user=body.user, stdin=stdin,
                timeout=body.timeout,
            )  # fmt: skip
        except CommandNotFoundError as exc:
            return ExecResponse(exit_code=127, stdout="", stderr=exc.message + "\n")
    return ExecResponse(
        exit_code=result.exit_code,
        stdout=result.stdout.decode(errors="replace"),
        stderr=result.stderr.decode(errors="replace"),
        signal=result.signal,
        timed_out=result.timed_out,
    )


async def _pump_client(ws: WebSocket, proc: ExecProcess | PtySession) -> None:
    """Client -> guest: stdin, eof, signals, resize."""
    while True:
        msg: dict[str, Any] = json.loads(await ws.receive_text())
        kind = msg.get("type")
        if kind == "stdin":
            data = base64.b64decode(msg.get("data", ""))
            if isinstance(proc, PtySession):
                await proc.write(data)
            else:
                await proc.write_stdin(data)
        elif kind == "eof" and isinstance(proc, ExecProcess):
            await proc.close_stdin()
        elif kind == "signal":
            sig = SIGNALS.get(str(msg.get("signal")))
            if sig is not None:
                await proc.signal(sig)
        elif kind == "resize" and isinstance(proc, PtySession):
            await proc.resize(int(msg["rows"]), int(msg["cols"]))


async def _pump_guest(ws: WebSocket, proc: ExecProcess | PtySession) -> dict[str, Any]:
    """Guest -> client: output, then the exit status."""
    if isinstance(proc, PtySession):
        while chunk := await proc.read():
            await ws.send_text(
                json.dumps({"type": "stdout", "data": base64.b64encode(chunk).decode()})
            )
        return {"type": "exit", "exit_code": await proc.wait(), "signal": None, "timed_out": False}
    async for ev in proc.events():
        if isinstance(ev, Stdout | Stderr):
            kind = "stdout" if isinstance(ev, Stdout) else "stderr"
            await ws.send_text(
                json.dumps({"type": kind, "data": base64.b64encode(ev.data).decode()})
            )
        elif isinstance(ev, Exit):
            return {"type": "exit", "exit_code": ev.exit_code, "signal": ev.signal,
                    "timed_out": ev.timed_out}  # fmt: skip
    raise ControlError("the command's stream ended without an exit status")


@router.websocket("/{ref}/exec/stream")
async def exec_stream(ws: WebSocket, ref: str) -> None:
    await ws.accept()
    svc = ws.app.state.service
    try:
        auth = authenticate(ws.app.state.db, bearer_token(ws))
        req: dict[str, Any] = json.loads(await ws.receive_text())
        async with guest_call(svc, auth.org, ref) as machine:
            client = await machine.client()
            proc: ExecProcess | PtySession
            if req.get("pty"):
                proc = await client.pty(
                    req.get("cmd"), rows=int(req.get("rows", 24)), cols=int(req.get("cols", 80)),
                    env=req.get("env") or None, cwd=req.get("cwd"), user=req.get("user"),
                )  # fmt: skip
            else:
                try:
                    proc = await client.exec_stream(
                        req["cmd"], env=req.get("env") or None, cwd=req.get("cwd"),
                        user=req.get("user"), timeout=req.get("timeout"),
                    )  # fmt: skip
                except CommandNotFoundError as exc:
                    err = base64.b64encode((exc.message + "\n").encode()).decode()
                    await ws.send_text(json.dumps({"type": "stderr", "data": err}))
                    await ws.send_text(json.dumps({"type": "exit", "exit_code": 127}))
                    await ws.close()
                    return
            guest = asyncio.ensure_future(_pump_guest(ws, proc))
            reader = asyncio.ensure_future(_pump_client(ws, proc))
            try:
                await asyncio.wait({guest, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not guest.done():  # the client went away: end the command with it
                    await proc.signal(signal.SIGKILL)
                    return
                final = guest.result()
            finally:
                for task in (guest, reader):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            await ws.send_text(json.dumps(final))
            await ws.close()
    except WebSocketDisconnect:
        return
    except ControlError as exc:
        with contextlib.suppress(Exception):
            await ws.send_text(json.dumps({"type": "error", "code": exc.code, "message": str(exc)}))
            await ws.close(code=1011 if exc.status >= 500 else 1008)
    except (ValueError, KeyError) as exc:
        with contextlib.suppress(Exception):
            await ws.send_text(json.dumps({"type": "error", "code": "validation_error",
                                           "message": f"bad request: {exc}"}))  # fmt: skip
            await ws.close(code=1008)
