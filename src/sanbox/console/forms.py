"""Form fields as the control plane takes them: blank means not given."""

from __future__ import annotations

from starlette.datastructures import FormData

from ..control.errors import InvalidRequestError

MAX_FIELD = 64 * 1024


def text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        return None
    if len(value) > MAX_FIELD:
        raise InvalidRequestError(f"{name} is longer than {MAX_FIELD} characters")
    return value.strip()


def number(form: FormData, name: str) -> int | None:
    value = text(form, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidRequestError(f"{name} must be a whole number, not {value[:20]!r}") from None


def text_list(form: FormData, name: str) -> list[str]:
    """One item a line (or comma-separated)."""
    value = text(form, name) or ""
    return [item.strip() for item in value.replace(",", "\n").splitlines() if item.strip()]


def pairs(form: FormData, name: str) -> dict[str, str]:
    """KEY=VALUE, one a line."""
    found = {}
    for line in (text(form, name) or "").splitlines():
        if not line.strip():
            continue
        key, sep, value = line.strip().partition("=")
        if not sep or not key:
            raise InvalidRequestError(f"{name}: {line[:40]!r} is not KEY=VALUE")
        found[key] = value
    return found
