"""Which of a fleet host's losses and returns its computers are told of (a `computer.unknown`
event each when it is declared lost, a `computer.reachable` each when it is back), so that a host
that flaps between lost and back (a compromised one, or a link that drops every minute) cannot
make the control plane write an event for every one of its computers at every flap, pushing an
org's real events out past its cap.

Per host: a loss is told to its computers when no loss of it was told within `WINDOW`; a return
is told when the loss before it was (each `unknown` has its `reachable`); a loss held back is
told once the window has passed, if the host is still lost then. The server's log says every loss
and return of a host, told or not. Only the events are bounded: a computer shows `unknown` while
its host is suspect or lost, read from the host's state at every request, never from these
events.

Memory is bounded by the hosts the caller still has (`keep_only`). Pure logic fed with times;
the caller owns the clock."""

from __future__ import annotations

import math
from collections.abc import Collection

WINDOW = 3600.0  # seconds in which a host's computers are told of one loss and its return


class HostFlaps:
    def __init__(self, window: float = WINDOW) -> None:
        if window < 0:
            raise ValueError("window must not be negative")
        self.window = window
        self._told_at: dict[str, float] = {}  # host id -> when its computers were told of a loss
        self._held: set[str] = set()  # host ids lost now whose computers were not told

    def lost(self, host_id: str, now: float) -> bool:
        """The host was declared lost at `now`: whether to tell its computers."""
        if now - self._told_at.get(host_id, -math.inf) < self.window:
            self._held.add(host_id)
            return False
        self._held.discard(host_id)
        self._told_at[host_id] = now
        return True

    def still_lost(self, host_id: str, now: float) -> bool:
        """The host is still lost at `now`: whether to tell its computers now (a loss held back,
        and the window since the last told has passed)."""
        return host_id in self._held and self.lost(host_id, now)

    def back(self, host_id: str) -> bool:
        """The host answers again: whether to tell its computers (their last word was that it
        was lost; a host this process never saw lost is told too)."""
        if host_id in self._held:
            self._held.discard(host_id)
            return False
        return True

    def keep_only(self, host_ids: Collection[str]) -> None:
        """Forget the hosts not in `host_ids` (retired, or gone from the table)."""
        self._told_at = {k: v for k, v in self._told_at.items() if k in host_ids}
        self._held &= set(host_ids)


__all__ = ["WINDOW", "HostFlaps"]
