"""`sanbox server`: serve the API and drive this host's computers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def server(
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default 7070).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Default $SANBOX_DATA_DIR or /var/lib/sanbox.")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="e.g. postgresql://user@host/db (default: SQLite)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="Serve HTTPS with this certificate (PEM).")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="The key of --tls-cert (PEM).")
    ] = None,
    tls_self_signed: Annotated[
        bool,
        typer.Option(
            "--tls-self-signed",
            help="Serve HTTPS for the E2B domain and *.domain with a certificate signed by a CA "
            "of the server's own (<data dir>/tls/ca.pem: trust it on clients).",
        ),
    ] = False,
) -> None:
    """Serve the Sanbox API (on 127.0.0.1:7070 by default) and run this host's computers."""
    import uvicorn

    from ..api import ServerSettings, create_app

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = ServerSettings.from_env(
        host=host, port=port, data_dir=data_dir, database_url=database_url
    )
    from ..host.egress.budget import raise_open_file_limit

    raise_open_file_limit()  # before the egress budget is fitted to it
    if tls_self_signed:
        from ..api.tls import wildcard

        ca, tls_cert, tls_key = wildcard(
            settings.layout.root / "tls", settings.e2b_domain or settings.port_domain
        )
        logging.getLogger(__name__).info("HTTPS with the server's own CA: trust %s", ca)
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together")
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        # the loop and parsers Sanbox is built and tested on, whatever else is installed: with
        # uvloop present, uvicorn's "auto" would run the server (egress relays included) on it
        loop="asyncio",
        http="h11",
        ws="websockets-sansio",
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
    )


def register(app: typer.Typer) -> None:
    app.command("server")(server)
