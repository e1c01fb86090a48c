"""Shared dependencies of the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ...control.computers import Computers
from ..auth import Principal, principal


async def computers(request: Request) -> Computers:  # async: no thread hop a call
    plane: Computers = request.app.state.computers
    return plane


Auth = Annotated[Principal, Depends(principal)]
Plane = Annotated[Computers, Depends(computers)]
