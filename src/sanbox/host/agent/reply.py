"""Reading what the guest answered: its JSON is a guest's word. A value of the wrong type, a
missing one, or a number JSON allows and the host cannot use (``Infinity``, ``NaN``, ``1e400``,
an integer past 64 bits) is a bad reply: ``RemoteError`` ``bad_reply``, as every malformed
answer is, never a ``KeyError``, ``TypeError`` or ``OverflowError`` escaping to the caller.
``what`` names the value in the error."""

from __future__ import annotations

import math
from typing import Any

from .errors import RemoteError

_INT64 = 1 << 63


def bad_reply(what: str, should_be: str) -> RemoteError:
    return RemoteError("bad_reply", f"the agent's {what} is not {should_be}")


def integer(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT64 <= value < _INT64:
        raise bad_reply(what, "an integer")
    return value


def optional_integer(value: object, what: str) -> int | None:
    return None if value is None else integer(value, what)


def number(value: object, what: str) -> float:
    if isinstance(value, int) and not isinstance(value, bool):
        return float(integer(value, what))
    if not isinstance(value, float) or not math.isfinite(value):
        raise bad_reply(what, "a number")
    return value


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise bad_reply(what, "a string")
    return value


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise bad_reply(what, "true or false")
    return value


def record(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_reply(what, "an object")
    return value


def items(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad_reply(what, "a list")
    return value
