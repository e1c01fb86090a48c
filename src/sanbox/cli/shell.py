"""`sanbox exec NAME -- CMD` (streamed, exits with the command's code) and `sanbox shell NAME`
(an interactive PTY, like ssh), both over the exec WebSocket."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from . import config
from ._options import EnvOption, pairs
from .streaming import stream


def exec_(
    name: Annotated[str, typer.Argument(help="Computer name or id.")],
    cmd: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    env: EnvOption = None,
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory."),
    user: str | None = typer.Option(None, "--user", "-u", help="Run as this user."),
) -> None:
    """Run a command, streaming its output; exits with its exit code.

    Put the command after `--` when it has options of its own: `sanbox exec box -- ls -l`.
    """
    envs = pairs(env, "--env")
    with config.reported():
        code = asyncio.run(stream(config.async_client(), name, cmd, envs, cwd, user, pty=False))
    raise typer.Exit(code)


def shell(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
    """Open an interactive shell (a PTY), like ssh."""
    with config.reported():
        code = asyncio.run(stream(config.async_client(), name, None, {}, None, None, pty=True))
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_)
    app.command("shell")(shell)
