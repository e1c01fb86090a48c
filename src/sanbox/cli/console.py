"""`sanbox console [--open]`: a one-time login link to the web console, for the configured key."""

from __future__ import annotations

import webbrowser

import typer

from . import config, views


def console(
    open_: bool = typer.Option(False, "--open", help="Open it in the default browser."),
) -> None:
    """Print a login link to the web console (good once, for two minutes; the key is not in it)."""
    with config.reported(), config.client() as client:
        url = client.console_link()
    views.link(url)
    if open_:
        webbrowser.open(url)


def register(app: typer.Typer) -> None:
    app.command("console")(console)
