"""`sanbox secret set|ls|get|rm|bind|unbind|bindings`: credentials the egress proxy adds to a
computer's requests, which the computer itself never sees (it holds a placeholder).

The value is read from standard input only (`--value-stdin`), never from an argument, so it stays
out of shell history and `ps`; no command prints it (the API never returns it).
"""

from __future__ import annotations

import getpass
import io
import json
import sys
from typing import Annotated, BinaryIO

import typer
from rich.markup import escape

from ..sdk import Secret, SecretNotFoundError
from . import config, org_views
from ._output import console, fail, show_record

app = typer.Typer(
    help="Secrets: credentials added to a computer's HTTPS requests; it only sees a placeholder.",
    no_args_is_help=True,
)

MAX_VALUE = 8 * 1024
"""Bytes of a value the API takes; standard input is read no further than this (and a newline)."""


def read_value(stream: BinaryIO) -> str:
    """All of `stream` (at most `MAX_VALUE` bytes and a newline), less ONE trailing newline.
    Errors say what is wrong with the value, never what it is."""
    data = stream.read(MAX_VALUE + 3)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if len(data) > MAX_VALUE:
        fail("invalid_secret", f"the value is over {MAX_VALUE} bytes")
    if not data:
        fail("invalid_secret", "the value is empty: pipe it in, e.g. `< key.txt`")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        fail("invalid_secret", "the value is not UTF-8 text")


def _stdin_value() -> str:
    if sys.stdin.isatty():  # typed in, then: not echoed
        typed = getpass.getpass("value (not shown): ")
        return read_value(io.BytesIO(typed.encode("utf-8", "surrogatepass")))
    stream = getattr(sys.stdin, "buffer", None)  # a text stream may have no bytes under it
    if stream is None:
        stream = io.BytesIO(sys.stdin.read(MAX_VALUE + 3).encode("utf-8", "surrogatepass"))
    return read_value(stream)


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


def _describe(s: Secret) -> str:
    rule = (
        f"placeholder only, in {s.header or 'Authorization'}"
        if s.placeholder_only
        else (s.header or "Authorization: Bearer …")
    )
    return escape(f"{', '.join(s.hosts)}; {rule}")


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
        fail(
            "invalid_argument",
            "give the value on standard input with --value-stdin "
            "(never as an argument: it would stay in shell history and ps)",
        )
    value = _stdin_value()
    with config.reported(), config.client() as client:
        secret = client.secrets.set(name, value, hosts, header=header, placeholder_only=placeholder)
    if as_json:
        console.print_json(json.dumps(secret.to_json()))
        return
    said = f"secret [bold]{escape(secret.name)}[/] version {secret.version}: {_describe(secret)}"
    console.print(said, highlight=False)


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
