"""How the CLI speaks: one-line errors with a stable code, never a traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(code: str, message: str, exit_code: int = 1) -> NoReturn:
    """One line on stderr, never wrapped (scripts read it whole), and the exit code."""
    err_console.print(f"[bold red]error[/] [dim]({code})[/] {message}", highlight=False,
                      soft_wrap=True)  # fmt: skip
    sys.exit(exit_code)


def mib(size: int) -> str:
    """A byte count as the CLI shows sizes: whole MiB."""
    return f"{size / 2**20:.0f} MiB"
