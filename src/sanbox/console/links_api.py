"""/v1/console/links: a one-time console login link for the calling key (`sanbox console`). The
link holds a token good once and for two minutes, never the key."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ..api.routes._deps import Auth
from ..api.routes.computers import ERRORS
from .sessions import LINK_TTL, Sessions

router = APIRouter(prefix="/v1/console", tags=["console"], responses=ERRORS)


class ConsoleLink(BaseModel):
    url: str = Field(description="opens the console logged in as this key; works once")
    expires_in: int = Field(description="seconds it stays good")


@router.post("/links", response_model=ConsoleLink, status_code=201)
async def make_link(request: Request, auth: Auth) -> ConsoleLink:
    sessions: Sessions = request.app.state.console_sessions
    token = sessions.make_link(auth.key.id)
    # in the fragment: a browser never sends it, so it is in no server's access log or Referer
    return ConsoleLink(url=f"{request.base_url}console/link#t={token}", expires_in=int(LINK_TTL))
