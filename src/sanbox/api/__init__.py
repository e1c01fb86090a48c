"""The HTTP contract: FastAPI routers under /v1 and their pydantic schemas."""

from .app import create_app
from .settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
