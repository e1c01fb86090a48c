"""/v1/events: a Server-Sent Events stream of the org's computer events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ...control.events import event_dict
from ...store import repo
from ._deps import DB, Auth, Service

router = APIRouter(prefix="/v1", tags=["events"])
KEEPALIVE = 15.0


def sse(item: dict[str, Any]) -> str:
    return f"id: {item['id']}\nevent: {item['type']}\ndata: {json.dumps(item)}\n\n"


@router.get("/events", response_class=StreamingResponse)
async def event_stream(
    request: Request, auth: Auth, svc: Service, db: DB, after: int = -1
) -> StreamingResponse:
    """Events as they happen (`after=ID` first replays the stored ones after that id)."""

    async def stream() -> AsyncIterator[str]:
        async with svc.bus.subscribe(auth.org.id) as queue:
            last = after
            if after >= 0:
                with db.session() as s:
                    for ev in repo.events_after(s, auth.org.id, after):
                        last = ev.id
                        yield sse(event_dict(ev))
            while not await request.is_disconnected():
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        item = await queue.get()
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if item["id"] <= last:
                    continue
                yield sse(item)

    return StreamingResponse(stream(), media_type="text/event-stream")
