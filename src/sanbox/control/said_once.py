"""Which failures of each computer a watch has recorded as events, so that one it meets every
round is recorded once, and a fleet host that varies how it fails cannot make it write more.

A failure is known by its kind: the class of the error at the root of its chain (a host's error
is raised again on this side as one of the door's classes, `fleet/link/wire.py`: a host chooses
among a fixed set, never a text; its message and `code` are its own to vary, so neither counts).
A kind is said when it begins (the first message of it is the one recorded), and again for the
same computer only once `AGAIN_AFTER` seconds have passed; within that window at most
`MOST_KINDS` kinds are said per computer. A computer that works again forgets its current kind,
not when each was said: a host that fails every other round says nothing new.

Memory is bounded: at most `MOST_KINDS` times per computer, past times dropped, and only the
computers the caller still holds (`keep_only`). Pure logic fed with times; the caller owns the
clock."""

from __future__ import annotations

from collections.abc import Collection

AGAIN_AFTER = 600.0  # seconds before a kind is recorded again for one computer
MOST_KINDS = 4  # kinds recorded per computer within that window
DEEPEST = 8  # causes followed to find the root of an error's chain


def kind_of(exc: BaseException) -> str:
    """The class of the error at the root of `exc`'s chain (`raise ... from`), by name."""
    for _ in range(DEEPEST):
        if exc.__cause__ is None:
            break
        exc = exc.__cause__
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


class SaidOnce:
    def __init__(self, again_after: float = AGAIN_AFTER, most_kinds: int = MOST_KINDS) -> None:
        if again_after <= 0 or most_kinds < 1:
            raise ValueError("again_after must be positive, most_kinds at least 1")
        self.again_after, self.most_kinds = again_after, most_kinds
        self._now: dict[str, str] = {}  # computer id -> the kind it fails with now
        self._said: dict[str, dict[str, float]] = {}  # computer id -> kind -> when it was said

    def __len__(self) -> int:
        return len(self._now.keys() | self._said.keys())

    def failed(self, computer_id: str, exc: BaseException, now: float) -> bool:
        """The computer failed with `exc` at `now`: whether to record it."""
        kind = kind_of(exc)
        if self._now.get(computer_id) == kind:  # the same failure as last round
            return False
        self._now[computer_id] = kind
        said = self._recent(computer_id, now)
        if kind in said or len(said) >= self.most_kinds:
            return False
        said[kind] = now
        self._said[computer_id] = said
        return True

    def worked(self, computer_id: str) -> None:
        """The computer works again: the next failure of it begins anew (if not said lately)."""
        self._now.pop(computer_id, None)

    def keep_only(self, computer_ids: Collection[str], now: float) -> None:
        """Forget the computers not in `computer_ids` (gone), and what was said before the
        window."""
        self._now = {k: v for k, v in self._now.items() if k in computer_ids}
        self._said = {
            k: recent for k in self._said if k in computer_ids and (recent := self._recent(k, now))
        }

    def _recent(self, computer_id: str, now: float) -> dict[str, float]:
        said = self._said.get(computer_id, {})
        return {kind: at for kind, at in said.items() if now - at < self.again_after}


__all__ = ["AGAIN_AFTER", "MOST_KINDS", "SaidOnce", "kind_of"]
