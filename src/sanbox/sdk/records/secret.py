"""Secrets and their bindings to computers (never a value: the API returns none)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import _known


@dataclass(frozen=True)
class Secret:
    """A stored credential: the hosts it is sent to and how. Its value is write-only: the API
    never returns it, so no record holds it."""

    id: str
    name: str
    hosts: list[str] = field(default_factory=list)  # api.openai.com, *.example.com
    header: str | None = None  # `Authorization: Bearer {value}`; None with placeholder_only
    placeholder_only: bool = False  # only replaces the placeholder, adds no header
    version: int = 1  # +1 at each rotation
    created_at: str | None = None
    updated_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Secret:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SecretBinding:
    """A secret bound to a computer: the computer sees only `placeholder` (in `env`, if set)."""

    secret: str  # the secret's name
    computer: str  # cmp_...
    placeholder: str  # sbx_ph_...: the proxy swaps it for the value on the secret's hosts
    env: str | None = None
    created_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SecretBinding:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
