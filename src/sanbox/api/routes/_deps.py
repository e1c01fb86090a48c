"""Shared dependencies of the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ...control.service import ComputerService
from ...store import Database
from ..auth import Principal, principal


def service(request: Request) -> ComputerService:
    svc: ComputerService = request.app.state.service
    return svc


def database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


Auth = Annotated[Principal, Depends(principal)]
Service = Annotated[ComputerService, Depends(service)]
DB = Annotated[Database, Depends(database)]
