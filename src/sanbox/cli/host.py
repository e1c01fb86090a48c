"""`sanbox host serve`: run this machine's host agent for a fleet's control plane."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="This machine as a host of a fleet (docs/fleet.md).", no_args_is_help=True)


@app.command("serve")
def serve(
    listen: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the host's calls (HTTPS).")] = 7071,
    tunnel_port: Annotated[int, typer.Option(help="Port of the guest agents' tunnel.")] = 7072,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Default $SANBOX_DATA_DIR or /var/lib/sanbox.")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Serve this host's computers to the fleet's control plane over mutual TLS: its
    certificate, key and the control CA's certificate in <data dir>/host/fleet/."""
    from ..fleet.link.agent import HostAgent
    from ..fleet.link.pki import host_identity
    from ..fleet.link.serve import serve as run
    from ..host.data.layout import DataDir
    from ..host.runtime import HostRuntime
    from ..host.settings import HostSettings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = HostSettings.from_env()
    if data_dir is not None:
        settings = dataclasses.replace(settings, data_dir=data_dir)
    layout = DataDir(settings.data_dir, settings.ram_dir)
    runtime = HostRuntime(layout, settings=settings)
    me = host_identity(runtime.data_dir.host / "fleet")
    missing = [p for p in (me.cert, me.key, me.peer_ca) if not p.is_file()]
    if missing:
        raise typer.BadParameter(
            f"{', '.join(map(str, missing))} missing: this host has not joined a fleet"
        )
    asyncio.run(run(HostAgent(runtime), listen, port, tunnel_port, me))
