"""Entry point of the `sanbox` command: the typer app and the one place errors become one line."""

from __future__ import annotations

import typer

from ..host.errors import HostError
from ..sdk.errors import SanboxError
from . import admin, computer, config, doctor, files, image, network, server, shell
from ._output import fail

app = typer.Typer(
    name="sanbox",
    help="Sanbox: self-hosted agent computers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(image.app, name="image")
app.command("doctor")(doctor.doctor)
app.command("server")(server.server)
computer.register(app)
shell.register(app)
files.register(app)
admin.register(app)
config.register(app)
network.register(app)


def main() -> None:
    try:
        app()
    except HostError as exc:
        fail(exc.code, str(exc))
    except SanboxError as exc:
        fail(exc.code, exc.message)
    except KeyboardInterrupt:
        fail("interrupted", "interrupted", 130)
