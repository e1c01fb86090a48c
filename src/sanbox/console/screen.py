"""A browser computer's screen: its VNC display (the browser type's Xvnc on the guest's
127.0.0.1:5901) as a binary WebSocket for noVNC, at /console/computers/{ref}/screen/{mode}.
`watch` passes the client's bytes through `api/ports/rfb.RfbViewOnly` (as a view-only
port cookie does), so no input reaches the guest
whatever the page does; `control` relays both ways (keyboard and mouse). Both check the session
cookie and the Origin, as the terminal does."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ..api.ports.rfb import RfbRefusedError, RfbViewOnly
from ..api.routes._ws import close_with_control_error, close_with_error
from ..control.errors import ControlError
from ..control.guest import TcpStream
from ..tasks import cancel_and_wait
from .access import LoginRequiredError, computers_of, viewer, while_valid
from .csrf import same_origin

router = APIRouter(prefix="/console/computers")
DISPLAY_PORT = 5901
MODES = ("watch", "control")


async def _up(ws: WebSocket, stream: TcpStream, gate: RfbViewOnly | None) -> None:
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes")
        if data is None:
            continue
        if gate is not None:
            data = gate.feed(data)
        if data:
            await stream.write(data)


async def _down(ws: WebSocket, stream: TcpStream) -> None:
    while chunk := await stream.read():
        await ws.send_bytes(chunk)


async def _relay(ws: WebSocket, stream: TcpStream, gate: RfbViewOnly | None) -> None:
    """Both directions until either ends; the error of the one that failed, if one did."""
    up = asyncio.ensure_future(_up(ws, stream, gate))
    down = asyncio.ensure_future(_down(ws, stream))
    try:
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in (up, down):
            await cancel_and_wait(task, (Exception,))


@router.websocket("/{ref}/screen/{mode}")
async def screen(ws: WebSocket, ref: str, mode: str) -> None:
    if not same_origin(ws) or mode not in MODES:
        await ws.close(code=1008, reason="refused")
        return
    await ws.accept(subprotocol="binary" if "binary" in ws.scope.get("subprotocols", []) else None)
    try:
        who = viewer(ws)
    except LoginRequiredError as exc:
        await close_with_error(ws, "unauthorized", exc.said)
        return
    gate = RfbViewOnly() if mode == "watch" else None
    try:
        async with computers_of(ws).tcp(who.org, ref, DISPLAY_PORT) as stream:
            if not await while_valid(ws, _relay(ws, stream, gate)):
                await ws.close(code=1008, reason="your console session ended: log in again")
                return
    except WebSocketDisconnect:
        return
    except RfbRefusedError as exc:
        await ws.close(code=1008, reason=str(exc)[:100])
        return
    except ControlError as exc:
        await close_with_control_error(ws, exc)
        return
    with contextlib.suppress(Exception):
        await ws.close()
