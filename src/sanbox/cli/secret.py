"""`sanbox secret set|ls|get|rm|bind|unbind|bindings`: credentials the egress proxy adds to a
computer's requests, which the computer itself never sees (it holds a placeholder).

The value is read from standard input only (`--value-stdin`), never from an argument, so it stays
out of shell history and `ps`; no command prints it (the API never returns it).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..sdk import SecretNotFoundError
from . import config, org_views
from ._output import fail, show_record
from .secret_values import NOT_ON_STDIN, stdin_value

app = typer.Typer(
    help="Secrets: credentials added to a computer's HTTPS requests; it only sees a placeholder.",
    no_args_is_help=True,
)

SecretOption = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="NAME[=ENV], repeatable: bind the org's secret NAME, its placeholder in $ENV.",
    ),
]


def secret_requests(values: list[str] | None) -> list[tuple[str, str | None]] | None:
    """`--secret NAME[=ENV]` values as (name, env) pairs; None when none was given."""
    if not values:
        return None
    out: list[tuple[str, str | None]] = []
    for value in values:
        name, sep, env = value.partition("=")
        if not name or (sep and not env):
            fail("invalid_argument", f"--secret must be NAME or NAME=ENV, got {value!r}")
        out.append((name, env or None))
    return out


@app.command("set")
def set_(
    name: Annotated[str, typer.Argument(help="Secret name, unique in the org.")],
    hosts: Annotated[
        list[str],
        typer.Option(
            "--host", help="Host it is sent to (api.openai.com, *.example.com); repeatable."
        ),
    ],
    value_stdin: bool = typer.Option(
        False, "--value-stdin", help="Read the value from standard input (required)."
    ),
    header: str | None = typer.Option(
        None,
        "--header",
        help="Header to write, {value} for the value (default: Authorization: Bearer {value}).",
    ),
    placeholder: bool = typer.Option(
        False,
        "--placeholder",
        help="Add no header: only replace the placeholder the computer sends in one header "
        "(Authorization, or the name --header gives).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the secret as JSON."),
) -> None:
    """Create a secret, or rotate it (version +1): bound computers use the new value at once."""
    if not value_stdin:
        fail("invalid_argument", NOT_ON_STDIN)
    value = stdin_value()
    with config.reported(), config.client() as client:
        secret = client.secrets.set(name, value, hosts, header=header, placeholder_only=placeholder)
    org_views.secret_saved(secret, as_json)


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the org's secrets (never their values)."""
    with config.reported(), config.client() as client:
        secrets = client.secrets.list()
    org_views.secrets(secrets, as_json)


@app.command("get")
def get(
    name: Annotated[str, typer.Argument(help="Secret name.")],
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one secret: hosts, header, version (not its value: nothing shows it)."""
    with config.reported(), config.client() as client:
        secret = client.secrets.get(name)
    show_record(secret.to_json(), as_json)


@app.command("rm")
def rm(
    names: Annotated[list[str], typer.Argument(help="Secret names.")],
    force: bool = typer.Option(False, "--force", "-f", help="Ignore secrets that do not exist."),
) -> None:
    """Delete secrets and their bindings: no request carries them any more."""
    with config.reported(), config.client() as client:
        for name in names:
            try:
                client.secrets.delete(name)
            except SecretNotFoundError:
                if not force:
                    raise
                continue
            org_views.secret_deleted(name)


@app.command("bind")
def bind(
    name: Annotated[str, typer.Argument(help="Secret name.")],
    computer: Annotated[str, typer.Argument(help="Computer name or id.")],
    env: str | None = typer.Option(
        None, "--env", "-e", help="Variable that holds the placeholder in the computer."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the binding as JSON."),
) -> None:
    """Bind a secret to a computer: it gets a placeholder, its requests the value."""
    with config.reported(), config.client() as client:
        binding = client.secrets.bind(name, computer, env=env)
    org_views.bound(binding, as_json)


@app.command("unbind")
def unbind(
    name: Annotated[str, typer.Argument(help="Secret name.")],
    computer: Annotated[str, typer.Argument(help="Computer name or id.")],
) -> None:
    """Unbind a secret from a computer: its requests no longer carry it."""
    with config.reported(), config.client() as client:
        binding = client.secrets.unbind(name, computer)
    org_views.unbound(binding)


@app.command("bindings")
def bindings(
    computer: Annotated[str, typer.Argument(help="Computer name or id.")],
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the secrets bound to a computer, with their placeholders."""
    with config.reported(), config.client() as client:
        found = client.secrets.bindings(computer)
    org_views.bindings(found, as_json)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="secret")
