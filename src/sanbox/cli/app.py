"""The `sanbox` command's typer app: every command, registered from its module.

Client commands load only typer, rich and the SDK: importing this module must not import the
server (FastAPI, SQLAlchemy, alembic) or `sanbox.host`; server-side commands import what they
need inside the command (ruff's TID253 and tests/unit/test_cli_imports.py keep it so).
"""

from __future__ import annotations

import typer

from . import (
    admin,
    audit,
    computer,
    config,
    console,
    doctor,
    files,
    host,
    image,
    mcp,
    network,
    pool,
    secret,
    server,
    shell,
    snapshot,
    ssh,
    template,
    usage,
)

app = typer.Typer(
    name="sanbox",
    help="Sanbox: self-hosted agent computers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(image.app, name="image")
app.add_typer(template.app, name="template")
app.add_typer(pool.app, name="pool")
app.add_typer(secret.app, name="secret")
app.add_typer(host.app, name="host")
app.command("doctor")(doctor.doctor)
app.command("server")(server.server)
app.command("console")(console.console)
computer.register(app)
snapshot.register(app)
shell.register(app)
ssh.register(app)
files.register(app)
admin.register(app)
audit.register(app)
usage.register(app)
config.register(app)
network.register(app)
mcp.register(app)
