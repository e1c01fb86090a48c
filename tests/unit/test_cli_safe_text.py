"""What the server or a guest wrote reaches the terminal as text to read, never as commands: a
request path in the audit log (recorded for anyone who sends one), a guest agent's error, a label,
the serial console, a build's output. An ESC in any of them is shown as `^[` (an OSC title or
clipboard write is not obeyed), and rich markup in them is printed, not parsed (`[/]` crashed the
table with MarkupError)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from rich.console import Console

from sanbox.cli import _output, org_views, views
from sanbox.cli.template import _line
from sanbox.sdk.types import AuditRecord

pytestmark = pytest.mark.unit

TITLE = "\x1b]0;pwned\x1b\\"  # OSC 0: the terminal's title
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: the user's clipboard
HOSTILE = f"x{TITLE}[/][bold]y{CLIPBOARD}\x9b2J\x7f"


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """What the CLI's consoles print, wide enough for a table's row on one line."""
    out = io.StringIO()
    shown = Console(file=out, width=400, emoji=False)
    for module in (_output, views, org_views):
        monkeypatch.setattr(module, "console", shown)
    monkeypatch.setattr(_output, "err_console", shown)
    yield out


def test_safe_shows_control_characters_and_keeps_what_is_meant() -> None:
    assert _output.safe(TITLE) == "^[]0;pwned^[\\"
    assert _output.safe(CLIPBOARD) == "^[]52;c;cm0gLXJmIH4=^G"
    assert _output.safe("a\x9bb\x7fc\x00") == "a\\x9bb^?c^@"
    assert _output.safe("a\tb") == "a       b"
    assert _output.safe("one\ntwo\r") == "one^Jtwo^M"  # one line stays one
    assert _output.safe("one\r\ntwo\x1b[2K\n", lines=True) == "one\ntwo^[[2K\n"
    assert _output.safe("plain: é, 日本, [x]") == "plain: é, 日本, [x]"


def test_the_audit_table_prints_a_hostile_path_as_text(screen: io.StringIO) -> None:
    record = AuditRecord(
        id=7,
        action=f"POST /v1/computers/{TITLE}/stop",
        status=404,
        target={"ref": HOSTILE},
        code="x[/]",
        client="[/]",
    )
    org_views.audit([record, AuditRecord(id=8, action="POST /v1/x[/]", status=404)], False)
    out = screen.getvalue()
    assert "\x1b" not in out and "\x9b" not in out
    assert "POST /v1/computers/^[]0;pwned^[\\/stop" in out
    assert "POST /v1/x[/]" in out and "404 x[/]" in out


def test_a_record_prints_a_label_with_markup_and_escapes(screen: io.StringIO) -> None:
    _output.show_record({"name": "demo", "labels[/]": {"k": "[/]"}, "last_error": HOSTILE})
    out = screen.getvalue()
    assert "\x1b" not in out
    assert "labels[/] " in out and '{"k": "[/]"}' in out
    assert "^[]0;pwned" in out and "[/][bold]y" in out


def test_an_error_line_shows_a_guests_escapes(screen: io.StringIO) -> None:
    with pytest.raises(SystemExit):
        _output.fail(f"guest{TITLE}", f"write failed: {CLIPBOARD}\nnext")
    out = screen.getvalue()
    assert "\x1b" not in out
    assert out == "error (guest^[]0;pwned^[\\) write failed: ^[]52;c;cm0gLXJmIH4=^G^Jnext\n"


def test_the_console_tail_and_events_show_escapes(screen: io.StringIO) -> None:
    views.console_tail([f"login: {TITLE}\r", "[/] ok"])
    views.event("2026-01-01", "error", f"guest said [/]{CLIPBOARD}")
    out = screen.getvalue()
    assert "\x1b" not in out
    assert out.splitlines() == [
        "login: ^[]0;pwned^[\\^M",
        "[/] ok",
        "2026-01-01 error guest said [/]^[]52;c;cm0gLXJmIH4=^G",
    ]


def test_a_builds_output_shows_escapes() -> None:
    out = io.StringIO()
    text = _line({"type": "output", "text": f"step {TITLE} [/]"})
    assert text is not None
    Console(file=out, width=200).print(text, highlight=False)
    assert out.getvalue() == "step ^[]0;pwned^[\\ [/]\n"
