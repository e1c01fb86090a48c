"""How the CLI speaks: one-line errors with a stable code, never a traceback."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape

# Text is printed as written: no `:name:` becomes an emoji (a label or a name that reads so is the
# user's data), and rich's table of emoji codes is not loaded for every table (~2 ms).
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


def busy(what: str) -> contextlib.AbstractContextManager[object]:
    """A spinner saying `what` while a long call runs, on a terminal; elsewhere nothing (rich
    draws its transient spinner only on a terminal: a script's stderr gets nothing either way,
    and loading the spinner and starting its thread cost ~5 ms)."""
    if err_console.is_terminal:
        return err_console.status(what)
    return contextlib.nullcontext()


def fail(code: str, message: str, exit_code: int = 1) -> NoReturn:
    """One line on stderr, never wrapped (scripts read it whole), and the exit code. The code
    and the message are text, never markup (a name in brackets, `[template]`, is printed)."""
    err_console.print(
        f"[bold red]error[/] [dim]({escape(code)})[/] {escape(message)}",
        highlight=False,
        soft_wrap=True,
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
