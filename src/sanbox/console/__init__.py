"""The web console: server-rendered pages (Jinja2 + htmx) at /console on the API's own app, each
a view over the control plane's front door (`Computers`, `Keys`, `AuditLog`) for the org of the
session's key; terminals on the exec protocol; assets vendored from npm (docs/console.md)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from . import computer, computers, files, links_api, login, pages, screen, terminal, usage
from .render import HERE

__all__ = ["mount"]


def mount(app: FastAPI) -> None:
    for module in (login, computers, computer, files, terminal, screen, pages, links_api, usage):
        app.include_router(module.router)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/console", status_code=303)
