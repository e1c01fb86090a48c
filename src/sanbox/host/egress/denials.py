"""Which denied attempts of one computer get written down (a log line and an event), so a guest
that tries 100,000 names writes a handful of rows, not 100,000. Pure: the clock is an argument.

- At most one report per (name, port, reason) per `per_key` seconds; the repeats in between are
  counted and told in the next report of that denial ("... and 57 more like it in the last 75 s").
- At most `per_window` reports per `window` seconds in all; what the cap holds back is counted and
  told in the next report that gets through ("14,000 other denials were not recorded").
- The table of recent denials keeps `max_keys` entries; the oldest go first, and the repeats they
  were holding join the "other denials" count."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

PER_KEY = 60.0
PER_WINDOW = 60
WINDOW = 60.0
MAX_KEYS = 1024


@dataclass(frozen=True)
class Denial:
    """One report: a denied attempt, with what was held back before it."""

    name: str  # the host name, or the address, or "*" for the connection cap
    port: int
    reason: str
    repeats: int = 0  # the same denial, not reported since its last report
    quiet: float = 0.0  # seconds since that last report (when there are repeats)
    others: int = 0  # other denials not reported (over the cap, or forgotten)

    def message(self) -> str:
        text = f"denied {self.name}:{self.port}: {self.reason}"
        if self.repeats:
            text += f" (and {self.repeats} more like it in the last {round(self.quiet)} s)"
        if self.others:
            text += f"; {self.others} other denials were not recorded"
        return text

    def data(self) -> dict[str, object]:
        return {
            "name": self.name,
            "port": self.port,
            "reason": self.reason,
            "repeats": self.repeats,
            "others": self.others,
        }


@dataclass
class _Seen:
    at: float
    repeats: int = 0


class DenialLimiter:
    def __init__(
        self,
        per_key: float = PER_KEY,
        per_window: int = PER_WINDOW,
        window: float = WINDOW,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.per_key, self.per_window, self.window, self.max_keys = (
            per_key,
            per_window,
            window,
            max_keys,
        )
        self._seen: OrderedDict[tuple[str, int, str], _Seen] = OrderedDict()
        self._window_start = float("-inf")
        self._in_window = 0
        self._others = 0

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, name: str, port: int, reason: str, now: float) -> Denial | None:
        """The report to write for this denied attempt, or None to only count it."""
        key = (name, port, reason)
        seen = self._seen.get(key)
        if seen is not None and now - seen.at < self.per_key:
            seen.repeats += 1
            return None
        if now - self._window_start >= self.window:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.per_window:
            if seen is not None:
                seen.repeats += 1
            else:
                self._others += 1
            return None
        self._in_window += 1
        denial = Denial(
            name,
            port,
            reason,
            seen.repeats if seen else 0,
            now - seen.at if seen else 0.0,
            self._others,
        )
        self._others = 0
        self._seen.pop(key, None)
        self._seen[key] = _Seen(now)
        while len(self._seen) > self.max_keys:
            _key, old = self._seen.popitem(last=False)
            self._others += old.repeats
        return denial
