"""Entry point of the `sanbox` command: the typer app and the one place errors become one line.

Client commands load only typer, rich and the SDK: importing this module must not import the
server (FastAPI, SQLAlchemy, alembic) or `sanbox.host`; server-side commands import what they
need inside the command (ruff's TID253 and tests/unit/test_cli_imports.py keep it so).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

import typer

from ..sdk.errors import SanboxError
from . import (
    admin,
    audit,
    computer,
    config,
    doctor,
    files,
    image,
    mcp,
    network,
    server,
    shell,
    ssh,
)
from ._output import fail

if TYPE_CHECKING:
    from ..host.errors import HostError

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
ssh.register(app)
files.register(app)
admin.register(app)
audit.register(app)
config.register(app)
network.register(app)
mcp.register(app)


def main() -> None:
    try:
        app()
    except SanboxError as exc:
        fail(exc.code, exc.message)
    except KeyboardInterrupt:
        fail("interrupted", "interrupted", 130)
    except Exception as exc:
        if not _is_host_error(exc):
            raise
        fail(exc.code, str(exc))


def _is_host_error(exc: Exception) -> TypeGuard[HostError]:
    """Only server-side commands import `sanbox.host`: a host error can only have been raised
    after its module was loaded, so look for it there instead of importing it."""
    errors = sys.modules.get("sanbox.host.errors")
    return errors is not None and isinstance(exc, errors.HostError)
