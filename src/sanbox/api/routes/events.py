"""/v1/events: a Server-Sent Events stream of the org's computer events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ..standing import chunks_while_standing, key_stands
from ._deps import Auth, Plane

router = APIRouter(prefix="/v1", tags=["events"])
KEEPALIVE = 15.0


def sse(item: dict[str, Any]) -> str:
    return f"id: {item['id']}\nevent: {item['type']}\ndata: {json.dumps(item)}\n\n"


@router.get("/events", response_class=StreamingResponse)
async def event_stream(
    request: Request, auth: Auth, plane: Plane, after: int = -1
) -> StreamingResponse:
    """Events as they happen (`after=ID` first replays the stored ones after that id), while
    the key stands (it ends within seconds of the key's revocation or expiry)."""

    async def stream() -> AsyncIterator[str]:
        async with plane.subscribe(auth.org) as queue:
            replayed: set[int] = set()  # sent from the store: not again from the live queue
            if after >= 0:
                for item in plane.events_after(auth.org, after):
                    replayed.add(item["id"])
                    yield sse(item)
            while not await request.is_disconnected():
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        item = await queue.get()
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if item["id"] in replayed or item["id"] <= after:  # (another node's may come late)
                    continue
                yield sse(item)

    return StreamingResponse(
        chunks_while_standing(key_stands(request), stream()), media_type="text/event-stream"
    )
