"""The CLI's one error line prints the server's message as text: brackets in it (a template's
step `[template]`, a name like `[/x]`) are neither eaten as markup nor crash the CLI."""

from __future__ import annotations

import pytest

from sanbox.cli import _output

pytestmark = pytest.mark.unit


def test_an_error_line_prints_brackets_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        _output.fail("computer_not_found", "no computer named '[/x]': line 1 [template]: bad")
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert "error (computer_not_found) no computer named '[/x]': line 1 [template]: bad" in err
