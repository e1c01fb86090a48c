"""The database's clock in a statement: `now()` on PostgreSQL, so every node agrees on lease
ages; on SQLite (one host, one process) this process's clock is the database's."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Interval, func, literal

from ..store.models import UtcDateTime, utcnow


def now(dialect: Any) -> ColumnElement[datetime]:
    return at(dialect, 0.0)


def at(dialect: Any, seconds: float) -> ColumnElement[datetime]:
    """The database's now plus `seconds` (negative: before now)."""
    if dialect.name == "postgresql":
        return func.now(type_=UtcDateTime()) + literal(timedelta(seconds=seconds), Interval())
    return literal(utcnow() + timedelta(seconds=seconds), UtcDateTime())
