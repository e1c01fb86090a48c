"""/v1/computers/{ref}/ssh-keys and the /ssh WebSocket: standard SSH into a computer.

The WebSocket carries one SSH connection to a fresh ``sshd -i`` in the guest (the agent's ``ssh``
stream; no port listens in the guest). It is authenticated like the exec WebSocket (a Bearer
header, or ``?token=``) and wakes a suspended computer. Binary messages are the connection's bytes,
both ways. Text messages are JSON: the client may send ``{"type": "eof"}`` when it will send no
more; the server sends ``{"type": "error", "code", "message"}`` and closes when it cannot connect.
The server closes the WebSocket (1000) when sshd ends; the client closing it ends sshd.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ...control.computers import Computers
from ...control.errors import ControlError
from ...control.guest import TcpStream
from ...tasks import cancel_and_wait
from ..auth import authenticate
from ..schemas import SshAccess, SshKeyAdd
from ..standing import KEY_LAPSED, key_stands, while_standing
from ._deps import Auth, Plane
from ._ws import close_with_control_error, close_with_error, control_message
from .computers import ERRORS

router = APIRouter(prefix="/v1/computers", tags=["ssh"], responses=ERRORS)


@router.post("/{ref}/ssh-keys", response_model=SshAccess)
async def authorize_ssh_key(ref: str, body: SshKeyAdd, auth: Auth, plane: Plane) -> SshAccess:
    """Let a public key log in as root over SSH (added to /root/.ssh/authorized_keys once). The
    answer carries the computer's host key, so a client can check it strictly (known_hosts)."""
    added, host_key = await plane.authorize_ssh_key(auth.org, ref, body.public_key)
    return SshAccess(user="root", host_key=host_key, added=added)


async def _to_guest(ws: WebSocket, stream: TcpStream) -> None:
    """Client -> sshd, until the client goes away."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes") is not None:
            await stream.write(message["bytes"])
        elif message.get("text") is not None:
            body = control_message(message["text"])
            if isinstance(body, dict) and body.get("type") == "eof":
                await stream.close_write()


async def _to_client(ws: WebSocket, stream: TcpStream) -> bool:
    """sshd -> client, until sshd ends (True) or the client is gone (False)."""
    while chunk := await stream.read():
        try:
            await ws.send_bytes(chunk)
        except (WebSocketDisconnect, RuntimeError, OSError):
            return False
    return True


async def _relay(ws: WebSocket, stream: TcpStream) -> bool:
    """Both directions at once; True when sshd ended first (the WebSocket is still open)."""
    up = asyncio.ensure_future(_to_guest(ws, stream))
    down = asyncio.ensure_future(_to_client(ws, stream))
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        if down.done():
            return down.result()
        up.result()  # the client went away (or sent something broken: raise it)
        return False
    finally:
        for task in (up, down):
            await cancel_and_wait(task, (Exception,))


@router.websocket("/{ref}/ssh")
async def ssh_connection(ws: WebSocket, ref: str) -> None:
    await ws.accept()
    if not await while_standing(key_stands(ws), _serve(ws, ref)):
        await close_with_error(ws, "unauthorized", KEY_LAPSED)


async def _serve(ws: WebSocket, ref: str) -> None:
    plane: Computers = ws.app.state.computers
    try:
        auth = authenticate(ws)
        async with plane.ssh(auth.org, ref) as stream:
            open_ = await _relay(ws, stream)
        if open_:
            await ws.close()
    except WebSocketDisconnect:
        return
    except ControlError as exc:
        await close_with_control_error(ws, exc)
    except ValueError as exc:  # a text message that is not JSON
        await close_with_error(ws, "validation_error", f"bad message: {exc}")
