"""Template builds boot VMs, so a server runs few at once; the orgs waiting for one take turns.
A slot that frees goes to the org that waited longest for its turn, not to the next build in line:
one org's queued builds (up to `MAX_BUILDS_PER_ORG`) wait behind every other org's next one, so
no org holds the builds of the others for longer than one of its own builds (itself bounded by
`BUILD_TIMEOUT`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator


class FairSlots:
    def __init__(self, slots: int = 1) -> None:
        self.free = slots
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @contextlib.asynccontextmanager
    async def held(self, org_id: str) -> AsyncIterator[None]:
        """A slot for one of `org_id`'s builds, for the block."""
        if self.free > 0 and not self._waiting:
            self.free -= 1
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(org_id, deque()).append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # given the slot as it was cancelled
                    self._hand_on()
                else:
                    self._forget(org_id, turn)
                raise
        try:
            yield
        finally:
            self._hand_on()

    def locked(self) -> bool:
        """No slot is free now."""
        return self.free <= 0

    def _hand_on(self) -> None:
        """The freed slot to the first waiting org's first build; that org goes last in turn."""
        while self._waiting:
            org_id, queue = next(iter(self._waiting.items()))
            turn = queue.popleft()
            if queue:
                self._waiting.move_to_end(org_id)
            else:
                del self._waiting[org_id]
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1

    def _forget(self, org_id: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(org_id)
        if queue is not None:
            with contextlib.suppress(ValueError):
                queue.remove(turn)
            if not queue:
                del self._waiting[org_id]
