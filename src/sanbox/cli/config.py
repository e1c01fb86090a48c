"""How the CLI reaches the server: one client factory (tests swap its transport) and
`sanbox config show|set` for the file the SDK reads (`~/.config/sanbox/config.toml`).

Tests set `TRANSPORT` (an `httpx.AsyncBaseTransport`, e.g. `httpx.MockTransport` or
`httpx.ASGITransport(app)`) and `WS_CONNECTOR` with `monkeypatch.setattr`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import typer

from ..sdk import AsyncSanbox, Sanbox, SanboxError, WebSocketConnector
from ..sdk.config import config_path, read_config_file, resolve_config, write_config_file
from . import secret_values, views
from ._output import fail

TRANSPORT: httpx.AsyncBaseTransport | None = None
WS_CONNECTOR: WebSocketConnector | None = None


def client() -> Sanbox:
    """The sync client the commands use: env, then config file, then the default URL."""
    return Sanbox(transport=TRANSPORT, ws_connector=WS_CONNECTOR)


def async_client() -> AsyncSanbox:
    return AsyncSanbox(transport=TRANSPORT, ws_connector=WS_CONNECTOR)


@contextmanager
def reported() -> Iterator[None]:
    """Turn any `SanboxError` into the CLI's one-line error, never a traceback."""
    try:
        yield
    except SanboxError as exc:
        fail(exc.code, exc.message)


def show() -> None:
    """Show where the CLI connects and which config file it reads."""
    with reported():
        resolved = resolve_config()
    views.where(config_path(), resolved)


def set_(
    url: str | None = typer.Option(None, "--url", help="Server URL."),
    api_key: str | None = typer.Option(
        None, "--api-key", help="API key (sbk_…); --api-key-stdin keeps it out of history and ps."
    ),
    api_key_stdin: bool = typer.Option(
        False, "--api-key-stdin", help="Read the API key from standard input."
    ),
) -> None:
    """Save the server URL and/or API key in the config file (owner-only)."""
    if url is None and api_key is None and not api_key_stdin:
        fail("invalid_argument", "give --url and/or --api-key-stdin (or --api-key)")
    key = secret_values.api_key(api_key, api_key_stdin)
    with reported():
        settings = read_config_file()
    if url is not None:
        settings["url"] = url
    if key is not None:
        settings["api_key"] = key
    views.saved(write_config_file(settings))


def register(app: typer.Typer) -> None:
    """Add `sanbox config show|set`."""
    group = typer.Typer(help="Where the CLI connects.", no_args_is_help=True)
    group.command("show")(show)
    group.command("set")(set_)
    app.add_typer(group, name="config")
