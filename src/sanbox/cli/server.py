"""`sanbox server`: serve the API and drive this host's computers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ..api.settings import DEFAULT_HOST, DEFAULT_PORT, ServerSettings


def server(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = DEFAULT_PORT,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Default $SANBOX_DATA_DIR or /var/lib/sanbox.")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="e.g. postgresql://user@host/db (default: SQLite)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Serve the Sanbox API (on 127.0.0.1:7070 by default) and run this host's computers."""
    import uvicorn

    from ..api import create_app

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = ServerSettings.from_env(
        host=host, port=port, data_dir=data_dir, database_url=database_url
    )
    app = create_app(settings)
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws="websockets-sansio")
