"""`sanbox pool set|ls`: warm pools, computers of a template kept ready so a create is a claim."""

from __future__ import annotations

from typing import Annotated

import typer

from . import config, org_views

app = typer.Typer(help="Warm pools: computers of a template kept ready; creates claim them.")


@app.command("set")
def set_(
    template: Annotated[str, typer.Argument(help="Template name.")],
    size: Annotated[int, typer.Option("--size", "-s", min=0, help="Computers kept ready.")],
    as_json: bool = typer.Option(False, "--json", help="Print the pool as JSON."),
) -> None:
    """Keep SIZE computers of TEMPLATE running and ready (0 empties the pool)."""
    with config.reported(), config.client() as client:
        pool = client.pools.set(template, size)
    org_views.pool_set(pool, as_json)


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the org's pools: size, ready computers, refill state."""
    with config.reported(), config.client() as client:
        pools = client.pools.list()
    org_views.pools(pools, as_json)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="pool")
