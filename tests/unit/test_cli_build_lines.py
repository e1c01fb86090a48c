"""The CLI prints a build's log as rich markup: what the build (the guest, a tenant) said is
escaped, so `[sanbox] ...` lines keep their prefix and nothing it prints is taken as markup."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from sanbox.cli.template import _line

pytestmark = pytest.mark.unit


def shown(record: dict[str, object]) -> str:
    out = io.StringIO()
    text = _line(record)
    assert text is not None
    Console(file=out, width=200).print(text, highlight=False)
    return out.getvalue().rstrip("\n")


def test_what_a_build_says_is_printed_as_it_is() -> None:
    assert shown({"type": "output", "text": "[sanbox] packages: 3 apt"}) == (
        "[sanbox] packages: 3 apt"
    )
    assert shown({"type": "output", "text": "[bold red]not markup[/]"}) == "[bold red]not markup[/]"
    assert shown({"type": "step", "index": 1, "total": 2, "description": "run [x]"}) == (
        "step 1/2 run [x]"
    )
    assert shown({"type": "done", "state": "failed", "message": "[sanbox] why"}) == (
        "build failed: [sanbox] why"
    )
