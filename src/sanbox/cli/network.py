"""`sanbox net allow|deny|show` (the egress allowlist) and
`sanbox port publish|ls|unpublish|view-link` (published ports)."""

from __future__ import annotations

from typing import Annotated

import typer

from . import config, views

net_app = typer.Typer(
    help="A computer's egress allowlist (nothing goes out unless listed).", no_args_is_help=True
)
port_app = typer.Typer(help="Publish a computer's ports as private URLs.", no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="Computer name or id.")]
Rules = Annotated[
    list[str], typer.Argument(help="Hosts (api.github.com), wildcards (*.pypi.org), cidr:port.")
]


@net_app.command("show")
def show(name: Name, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show what the computer may reach."""
    with config.reported(), config.client() as client:
        allow = client.computers.get(name).allowlist()
    views.allowlist(name, allow, as_json=as_json)


@net_app.command("allow")
def allow(name: Name, rules: Rules) -> None:
    """Add hosts or rules to the allowlist (applies at once)."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        current = computer.allowlist()
        closed = computer.set_allowlist(current + [r for r in rules if r not in current])
        views.allowlist(name, computer.allowlist(), closed)


@net_app.command("deny")
def deny(name: Name, rules: Rules) -> None:
    """Remove hosts or rules from the allowlist; open connections to them are closed."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        closed = computer.set_allowlist([r for r in computer.allowlist() if r not in rules])
        views.allowlist(name, computer.allowlist(), closed)


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
    views.published(published)


@port_app.command("ls")
def ls(name: Name, as_json: bool = typer.Option(False, "--json")) -> None:
    """List published ports."""
    with config.reported(), config.client() as client:
        ports = client.computers.get(name).ports()
    views.ports(ports, as_json)


@port_app.command("unpublish")
def unpublish(name: Name, port: Annotated[int, typer.Argument(min=1, max=65535)]) -> None:
    """Stop publishing PORT."""
    with config.reported(), config.client() as client:
        client.computers.get(name).unpublish(port)
    views.unpublished(name, port)


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
    views.view_link(link)


def register(app: typer.Typer) -> None:
    app.add_typer(net_app, name="net")
    app.add_typer(port_app, name="port")
