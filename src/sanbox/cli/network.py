"""`sanbox net allow|deny|show` (the egress allowlist) and
`sanbox port publish|ls|unpublish|view-link` (published ports)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from . import config
from ._output import console, err_console

net_app = typer.Typer(help="A computer's egress allowlist (nothing goes out unless listed).",
                      no_args_is_help=True)  # fmt: skip
port_app = typer.Typer(help="Publish a computer's ports as private URLs.", no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="Computer name or id.")]
Rules = Annotated[
    list[str], typer.Argument(help="Hosts (api.github.com), wildcards (*.pypi.org), cidr:port.")
]


def _show(name: str, allow: list[str], closed: int = 0) -> None:
    listed = ", ".join(allow) if allow else "nothing (all outbound traffic is denied)"
    console.print(f"{name} may reach: {listed}", highlight=False)
    if closed:
        console.print(f"closed {closed} open connection(s) no longer allowed", highlight=False)


@net_app.command("show")
def show(name: Name, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show what the computer may reach."""
    with config.reported(), config.client() as client:
        allow = client.computers.get(name).allowlist()
    if as_json:
        print(json.dumps({"allow": allow}))
    else:
        _show(name, allow)


@net_app.command("allow")
def allow(name: Name, rules: Rules) -> None:
    """Add hosts or rules to the allowlist (applies at once)."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        current = computer.allowlist()
        closed = computer.set_allowlist(current + [r for r in rules if r not in current])
        _show(name, computer.allowlist(), closed)


@net_app.command("deny")
def deny(name: Name, rules: Rules) -> None:
    """Remove hosts or rules from the allowlist; open connections to them are closed."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        closed = computer.set_allowlist([r for r in computer.allowlist() if r not in rules])
        _show(name, computer.allowlist(), closed)


@port_app.command("publish")
def publish(
    name: Name,
    port: Annotated[int, typer.Argument(min=1, max=65535, help="Port inside the computer.")],
    public: bool = typer.Option(False, "--public", help="Reachable without an API key."),
) -> None:
    """Publish PORT as http://PORT-NAME.ORG.localhost:7070/ (PORT-NAME.localhost in the default
    org); an API key of the org is required unless --public. Prints the URL."""
    with config.reported(), config.client() as client:
        published = client.computers.get(name).publish(port, public)
    how = "public" if published.public else "private: a key of its org, or ?token=KEY once"
    console.print(f"{published.url}  ({how})", highlight=False)


@port_app.command("ls")
def ls(name: Name, as_json: bool = typer.Option(False, "--json")) -> None:
    """List published ports."""
    with config.reported(), config.client() as client:
        ports = client.computers.get(name).ports()
    if as_json:
        print(json.dumps([{"port": p.port, "public": p.public, "url": p.url} for p in ports]))
        return
    table = Table("PORT", "ACCESS", "URL")
    for p in ports:
        table.add_row(str(p.port), "public" if p.public else "private", p.url)
    console.print(table)


@port_app.command("unpublish")
def unpublish(name: Name, port: Annotated[int, typer.Argument(min=1, max=65535)]) -> None:
    """Stop publishing PORT."""
    with config.reported(), config.client() as client:
        client.computers.get(name).unpublish(port)
    console.print(f"port {port} of {name} is no longer published", highlight=False)


@port_app.command("view-link")
def view_link(
    name: Name,
    port: Annotated[int, typer.Argument(min=1, max=65535, help="A private published port.")],
    expires_in: Annotated[
        int | None,
        typer.Option(
            "--expires-in",
            help="Seconds the link works (default: an hour; 60 to 7 days, the server checks).",
        ),
    ] = None,
) -> None:
    """Print a URL that opens PORT view-only for whoever holds it (watch, never take over). It
    holds no API key, and stops working when it expires, the port is unpublished, the computer
    is deleted or your key revoked."""
    with config.reported(), config.client() as client:
        link = client.computers.get(name).view_link(port, expires_in)
    print(link.url)
    err_console.print(f"view-only until {link.expires_at}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(net_app, name="net")
    app.add_typer(port_app, name="port")
