"""Which module registers each top-level `sanbox` command, in the order the whole app registers
them, and the typer app made of some or all of them.

The whole app (sanbox.cli.app) registers every module. `sanbox NAME ...` registers only NAME's
(sanbox.cli.main): typer turns each registered command into a click command before it reads argv
(~0.06 s for all of them), and each module imports what its commands need. No typer at import:
`sanbox` decides which way to go before loading it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

MODULES: dict[str, tuple[str, ...]] = {
    "image": ("image",),
    "template": ("template",),
    "pool": ("pool",),
    "secret": ("secret",),
    "host": ("host",),
    "doctor": ("doctor",),
    "server": ("server",),
    "console": ("console",),
    "computer": (
        "create",
        "ls",
        "get",
        "stop",
        "start",
        "restart",
        "pause",
        "resume",
        "update",
        "move",
        "rm",
        "logs",
    ),
    "snapshot": ("snapshot", "fork"),
    "shell": ("exec", "shell"),
    "ssh": ("ssh", "ssh-config", "ssh-proxy"),
    "files": ("cp",),
    "admin": ("org", "key"),
    "audit": ("audit",),
    "usage": ("usage",),
    "config": ("config",),
    "network": ("net", "port"),
    "mcp": ("mcp",),
}
"""Each module (of sanbox.cli) and the names it registers with its `register(app)`."""


def module_of(name: str) -> str | None:
    """The module that registers top-level command `name`; None for no command."""
    return next((module for module, names in MODULES.items() if name in names), None)


def typer_app(modules: list[str]) -> typer.Typer:
    """The `sanbox` typer app with the commands of `modules` registered, in that order."""
    import typer

    app = typer.Typer(
        name="sanbox",
        help="Sanbox: self-hosted agent computers.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    for module in modules:
        import_module(f"{__package__}.{module}").register(app)
    return app
