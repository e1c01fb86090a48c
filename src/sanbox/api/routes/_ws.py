"""What the API's WebSockets (exec, ssh) share: an error sent as the last message before closing."""

from __future__ import annotations

import contextlib
import json

from fastapi import WebSocket

from ...control.errors import ControlError


async def close_with_error(ws: WebSocket, code: str, message: str, close_code: int = 1008) -> None:
    """Send `{"type": "error", code, message}` and close; a client already gone is fine."""
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps({"type": "error", "code": code, "message": message}))
        await ws.close(code=close_code)


async def close_with_control_error(ws: WebSocket, exc: ControlError) -> None:
    await close_with_error(ws, exc.code, str(exc), 1011 if exc.status >= 500 else 1008)
