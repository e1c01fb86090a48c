"""The `sanbox` command's typer app: every command, registered from its module
(sanbox.cli.registry says which, in which order).

Client commands load only typer, rich and the SDK: importing this module must not import the
server (FastAPI, SQLAlchemy, alembic) or `sanbox.host`; server-side commands import what they
need inside the command (ruff's TID253 and tests/unit/test_cli_imports.py keep it so).
"""

from __future__ import annotations

from .registry import MODULES, typer_app

app = typer_app(list(MODULES))
