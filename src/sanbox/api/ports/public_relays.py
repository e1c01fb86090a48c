"""A bound on the connections open at once to one computer's public ports. A visitor to a public
port shows no key, so the per-key and per-org bound of open requests (`api/open_requests.py`)
cannot hold them: without this, anyone could hold thousands of the server's connections, tasks
and guest streams open through one public URL. Past `PER_COMPUTER`, the next is refused 429
`too_many_open_requests` before anything is relayed; a computer's bound is its own, so one
flooded public port leaves every other computer's alone. The relay runs on the event loop only,
so the table needs no lock."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator

from ...control.errors import TooManyRequestsError

PER_COMPUTER = 256  # connections open at once to one computer's public ports
RETRY_AFTER = 1  # seconds a refused visitor is told to wait


class PublicRelays:
    def __init__(self, per_computer: int = PER_COMPUTER) -> None:
        if per_computer < 1:
            raise ValueError("per_computer must be at least 1")
        self.per_computer = per_computer
        self._open: collections.Counter[str] = collections.Counter()

    def open(self, computer_id: str) -> int:
        """The relays to the computer's public ports open now."""
        return self._open[computer_id]

    @contextlib.contextmanager
    def holding(self, computer_id: str) -> Iterator[None]:
        """A place among the computer's public relays for the `with` block (TooManyRequestsError
        if none is left, before the block runs)."""
        if self._open[computer_id] >= self.per_computer:
            raise TooManyRequestsError(
                f"this computer's public ports have {self.per_computer} connections open, the "
                "most they may: try again once some have closed",
                RETRY_AFTER,
                "too_many_open_requests",
            )
        self._open[computer_id] += 1
        try:
            yield
        finally:
            self._open[computer_id] -= 1
            if self._open[computer_id] <= 0:
                del self._open[computer_id]
