"""How the CLI speaks: one-line errors with a stable code, never a traceback."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from typing import Any, NoReturn

from rich.console import Console
from rich.text import Text

# Text is printed as written: no `:name:` becomes an emoji (a label or a name that reads so is the
# user's data), and rich's table of emoji codes is not loaded for every table (~2 ms).
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


# C0 controls, DEL and C1 controls: what a terminal may take as a command (ESC starts a title,
# clipboard or colour sequence; 0x9b is a one-byte CSI on some terminals). Rich drops BEL and CR
# but prints ESC as it is.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    char = ord(match.group())
    return f"^{chr(char ^ 0x40)}" if char < 0x20 or char == 0x7F else f"\\x{char:02x}"


def safe(text: str, lines: bool = False) -> str:
    """Text from the server or a guest (a request path in the audit log, a guest's error, its
    serial console) made fit for a terminal: a control character is shown, never obeyed (ESC as
    `^[`, as `cat -v` shows it; a C1 byte as `\\x9b`), so what a tenant or a guest wrote cannot
    retitle the window, write the clipboard or hide a line. A tab is spaces; a newline stays one
    only where a value of several `lines` is meant (a CR before it is dropped: a serial console's
    line ends). Not markup-escaped: print it as `Text`, with `markup=False`, or `escape` it."""
    text = text.expandtabs(8)
    if lines:
        text = text.replace("\r\n", "\n")
        return "\n".join(_CONTROLS.sub(_visible, line) for line in text.split("\n"))
    return _CONTROLS.sub(_visible, text)


def plain(text: object) -> Text:
    """Server or guest text as a table cell or a printed value: `safe`, and never markup (rich
    parses a `str` cell as markup: `[/]` in a name raised MarkupError)."""
    return Text(safe(str(text)))


def busy(what: str) -> contextlib.AbstractContextManager[object]:
    """A spinner saying `what` while a long call runs, on a terminal; elsewhere nothing (rich
    draws its transient spinner only on a terminal: a script's stderr gets nothing either way,
    and loading the spinner and starting its thread cost ~5 ms)."""
    if err_console.is_terminal:
        return err_console.status(what)
    return contextlib.nullcontext()


def fail(code: str, message: str, exit_code: int = 1) -> NoReturn:
    """One line on stderr, never wrapped (scripts read it whole), and the exit code. The code
    and the message are text, never markup (a name in brackets, `[template]`, is printed), and
    are `safe`: a guest agent's error reaches here through the API, and one line stays one."""
    err_console.print(
        Text.assemble(("error", "bold red"), " ", (f"({safe(code)})", "dim"), " ", safe(message)),
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
        table.add_row(Text(safe(key), style="bold"), plain(shown))
    console.print(table)
