"""`sanbox pool set|ls`: warm pools, computers of a template kept ready so a create is a claim."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from . import config, views
from ._output import console

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
    if as_json:
        console.print_json(json.dumps(pool.to_json()))
        return
    console.print(
        f"pool [bold]{pool.template}[/]: size {pool.size}, {pool.ready} ready, {pool.refill}",
        highlight=False,
    )


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the org's pools: size, ready computers, refill state."""
    with config.reported(), config.client() as client:
        pools = client.pools.list()
    views.pools(pools, as_json)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="pool")
