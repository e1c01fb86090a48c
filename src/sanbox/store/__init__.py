"""State: SQLAlchemy 2 models, repositories and alembic migrations. SQLite (WAL) under the data dir
by default, PostgreSQL by URL."""

from . import fleet_models  # noqa: F401  (its tables in Base's metadata)
from .db import Database
from .models import ApiKey, AuditRow, Base, ComputerRow, EventRow, Org

__all__ = ["ApiKey", "AuditRow", "Base", "ComputerRow", "Database", "EventRow", "Org"]
