"""Shared dependencies of the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ...control.computers import Computers
from ..auth import Principal, principal


def computers(request: Request) -> Computers:
    plane: Computers = request.app.state.computers
    return plane


Auth = Annotated[Principal, Depends(principal)]
Plane = Annotated[Computers, Depends(computers)]
