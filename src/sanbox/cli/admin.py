"""`sanbox org create|ls` and `sanbox key create`: admin-key commands."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.table import Table

from . import config
from ._output import console, err_console

org_app = typer.Typer(help="Organisations (admin key).", no_args_is_help=True)
key_app = typer.Typer(help="API keys (admin key).", no_args_is_help=True)


@org_app.command("create")
def org_create(name: str = typer.Argument(..., help="Org name.")) -> None:
    """Create an organisation."""
    with config.reported(), config.client() as client:
        org = client.orgs.create(name)
    console.print(f"created org {org.name} ({org.id})", highlight=False)


@org_app.command("ls")
def org_ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List organisations."""
    with config.reported(), config.client() as client:
        orgs = client.orgs.list()
    if as_json:
        console.print_json(json.dumps([asdict(o) for o in orgs]))
        return
    table = Table("NAME", "ID", "CREATED", box=None)
    for org in orgs:
        table.add_row(org.name, org.id, org.created_at or "")
    console.print(table)


@key_app.command("create")
def key_create(
    org: str = typer.Option(..., "--org", help="The org the key acts for."),
    name: str | None = typer.Option(None, "--name", help="A label for the key."),
    admin: bool = typer.Option(False, "--admin", help="Allow admin routes."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create an API key; the key itself is shown once."""
    with config.reported(), config.client() as client:
        key = client.keys.create(org, name=name, admin=admin)
    if as_json:
        console.print_json(json.dumps(asdict(key)))
        return
    err_console.print(f"created key {key.id} for org {key.org} (shown once):", highlight=False)
    console.print(key.key or "", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(org_app, name="org")
    app.add_typer(key_app, name="key")
