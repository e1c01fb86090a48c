"""How the CLI speaks: one-line errors with a stable code, never a traceback."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(code: str, message: str, exit_code: int = 1) -> NoReturn:
    """One line on stderr, never wrapped (scripts read it whole), and the exit code."""
    err_console.print(
        f"[bold red]error[/] [dim]({code})[/] {message}", highlight=False, soft_wrap=True
    )
    sys.exit(exit_code)


def mib(size: int) -> str:
    """A byte count as the CLI shows sizes: whole MiB."""
    return f"{size / 2**20:.0f} MiB"


def show_record(record: dict[str, Any], as_json: bool = False) -> None:
    """One record (`get` commands): JSON, or a two-column table of its fields."""
    if as_json:
        console.print_json(json.dumps(record))
        return
    from rich.table import Table  # here: most commands print no table

    table = Table(show_header=False, box=None)
    for key, value in record.items():
        shown = json.dumps(value) if isinstance(value, dict) else str(value)
        table.add_row(f"[bold]{key}[/]", shown)
    console.print(table)
