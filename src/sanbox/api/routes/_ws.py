"""What the API's WebSockets (exec, ssh) share: a client's text message read as the protocol's
(anything else is a `ValueError`: the socket ends with `validation_error`), and an error sent as
the last message before closing."""

from __future__ import annotations

import contextlib
import json

from fastapi import WebSocket, WebSocketDisconnect

from ...control.errors import ControlError

MOST_CONTROL = 4096  # characters of a control message (the protocols' are a few dozen)


async def receive_text(ws: WebSocket) -> str:
    """The client's next message, which must be text (WebSocketDisconnect when it is gone)."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text = message.get("text")
    if text is None:
        raise ValueError("a binary message where the protocol's JSON text was expected")
    return str(text)


def control_message(text: str) -> object:
    """A small JSON control message, parsed (ValueError if it is not one)."""
    if len(text) > MOST_CONTROL:
        raise ValueError(f"a control message over {MOST_CONTROL} characters")
    try:
        return json.loads(text)
    except RecursionError:  # nesting deeper than the parser goes: not a ValueError of its own
        raise ValueError("a control message nested too deep") from None


async def close_with_error(ws: WebSocket, code: str, message: str, close_code: int = 1008) -> None:
    """Send `{"type": "error", code, message}` and close; a client already gone is fine."""
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps({"type": "error", "code": code, "message": message}))
        await ws.close(code=close_code)


async def close_with_control_error(ws: WebSocket, exc: ControlError) -> None:
    await close_with_error(ws, exc.code, str(exc), 1011 if exc.status >= 500 else 1008)
