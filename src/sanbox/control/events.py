"""Events: every state change is written to the store with its event, then fanned out to live
subscribers (the SSE stream) through bounded queues. The store keeps them `RETENTION_DAYS` and an
org's newest `ORG_CAP` (`retention.Sweeper`): a guest's denials, at most 60 a minute a computer,
would otherwise grow it without end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..store.models import EventRow

RETENTION_DAYS = 30.0  # events older go (SANBOX_EVENT_RETENTION_DAYS)
ORG_CAP = 1_000_000  # an org's newest events kept (SANBOX_EVENT_ORG_CAP)


def event_dict(ev: EventRow) -> dict[str, Any]:
    return {
        "id": ev.id,
        "computer_id": ev.computer_id,
        "type": ev.type,
        "message": ev.message,
        "data": ev.data,
        "created_at": ev.created_at.isoformat(),
        "org_id": ev.org_id,
        "actor": ev.actor,  # prefix of the key whose request caused it, if one did
    }


class EventBus:
    def __init__(self) -> None:
        self._subscribers: set[tuple[str, asyncio.Queue[dict[str, Any]]]] = set()
        self.taps: list[Callable[[EventRow], None]] = []  # every event, every org (counters)

    def publish(self, ev: EventRow, tap: bool = True) -> None:
        """To the org's subscribers; with `tap`, to every tap first (an event of this node)."""
        for each in self.taps if tap else ():
            each(ev)
        payload = event_dict(ev)
        for org_id, queue in list(self._subscribers):
            if org_id == ev.org_id:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(payload)

    @contextlib.asynccontextmanager
    async def subscribe(self, org_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        entry = (org_id, queue)
        self._subscribers.add(entry)
        try:
            yield queue
        finally:
            self._subscribers.discard(entry)
