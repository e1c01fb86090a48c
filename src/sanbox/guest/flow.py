"""Per-stream flow control windows, shared by the agent and the host client.

``SendWindow`` is the credit this side may still spend on DATA; it grows with
the peer's WINDOW frames. ``ReceiveWindow`` counts DATA bytes this side has
consumed and says when to grant them back to the peer.
"""

from __future__ import annotations

import asyncio

from .protocol import INITIAL_WINDOW


class SendWindow:
    def __init__(self, size: int = INITIAL_WINDOW) -> None:
        self._available = size
        self._changed = asyncio.Event()

    @property
    def available(self) -> int:
        return self._available

    def grant(self, credit: int) -> None:
        self._available += credit
        self._changed.set()

    async def take(self, want: int) -> int:
        """Wait for credit and reserve up to ``want`` bytes of it; returns the amount."""
        while self._available <= 0:
            self._changed.clear()
            await self._changed.wait()
        amount = min(want, self._available)
        self._available -= amount
        return amount

    def spend(self, amount: int) -> None:
        """Use credit already seen to be ``available`` (a reader that checked it first)."""
        self._available -= amount

    def refund(self, amount: int) -> None:
        if amount > 0:
            self.grant(amount)


class ReceiveWindow:
    """Pure accounting: ``consumed(n)`` returns the credit to grant now (or 0)."""

    def __init__(self, size: int = INITIAL_WINDOW) -> None:
        self._threshold = max(1, size // 4)
        self._pending = 0

    def consumed(self, amount: int) -> int:
        self._pending += amount
        if self._pending < self._threshold:
            return 0
        grant, self._pending = self._pending, 0
        return grant
