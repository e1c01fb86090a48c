"""What one sandbox may hold of the server's memory, and how its creates keep to their counts.

A watching stream's queue of a process's events (`EventQueue`) is bounded in bytes as well as in
events: a chunk of output is up to 64 KiB (more in base64), so a count alone let 64 processes'
streams hold gigabytes. A put waits for room, so a slow stream slows the process's output, never
grows the server's memory; one event always fits an empty queue, whatever its size.

A create that checks a count (processes, watchers), then awaits the guest, then registers what it
made lets creates at once all pass the check. `Reservations` counts the creates under way with
what is registered: a slot is taken before the first await and given back when the create is
registered or fails."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

QUEUE = 64  # events queued per watching stream
QUEUE_BYTES = 2**20  # bytes of events queued per watching stream (one event always fits)
EVENT_COST = 100  # bytes counted for an event besides its data (a dict, its keys)

Event = dict[str, Any]  # a ProcessEvent, `{"start": …}`, `{"data": …}` or `{"end": …}`


def cost(event: Event | None) -> int:
    """The bytes an event is counted for: its data (base64 text) and `EVENT_COST`."""
    if event is None:
        return 0
    data = event.get("data")
    held = sum(len(v) for v in data.values() if isinstance(v, str)) if isinstance(data, dict) else 0
    return held + EVENT_COST


class EventQueue(asyncio.Queue[Event | None]):
    """A process's events for one watching stream (None after its end), at most `QUEUE` of them
    and `QUEUE_BYTES` bytes (`cost`)."""

    def __init__(self, most_bytes: int = QUEUE_BYTES) -> None:
        super().__init__(QUEUE)
        self.most_bytes = most_bytes
        self.bytes = 0

    def full(self) -> bool:
        return super().full() or self.bytes >= self.most_bytes

    def _put(self, item: Event | None) -> None:
        self.bytes += cost(item)
        super()._put(item)

    def _get(self) -> Event | None:
        item = super()._get()
        self.bytes -= cost(item)
        return item


class Reservations:
    """Creates under way, by computer: `held(computer)` around the awaits of one."""

    def __init__(self) -> None:
        self._under_way: dict[str, int] = {}

    def count(self, computer_id: str) -> int:
        return self._under_way.get(computer_id, 0)

    @contextlib.contextmanager
    def held(self, computer_id: str) -> Iterator[None]:
        self._under_way[computer_id] = self.count(computer_id) + 1
        try:
            yield
        finally:
            left = self.count(computer_id) - 1
            if left:
                self._under_way[computer_id] = left
            else:
                self._under_way.pop(computer_id, None)
