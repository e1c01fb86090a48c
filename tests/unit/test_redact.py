"""Log redaction reads a query as the server does: a `token` parameter is blanked however its
name, its `=` or its value is percent-encoded or cased, whatever separates it; other parameters
are left alone."""

from __future__ import annotations

import pytest

from sanbox.api.redact import redact

pytestmark = pytest.mark.unit

SECRET = "s3cr3tvalue"


@pytest.mark.parametrize(
    "line",
    [
        f"GET /x?token={SECRET} HTTP/1.1",
        f"GET /x?%74oken={SECRET} HTTP/1.1",
        f"GET /x?tok%65n={SECRET} HTTP/1.1",
        f"GET /x?%54%4F%4B%45%4E={SECRET} HTTP/1.1",
        f"GET /x?token%3D{SECRET}&a=1 HTTP/1.1",
        f"GET /x?TOKEN={SECRET} HTTP/1.1",
        f"GET /x?a=1;token={SECRET} HTTP/1.1",
        f"GET /x?a=1&Access_Token={SECRET} HTTP/1.1",
        f"GET /x?tok%2565n={SECRET} HTTP/1.1",  # encoded twice
        f"GET /x?token+={SECRET}",  # `+` is a space, stripped by nobody: still blanked
        f"GET /x?sanbox_view_token={SECRET} HTTP/1.1",  # a view link's token
        f"GET /x?a=1&Sanbox_View_Token={SECRET}&b=2 HTTP/1.1",
        f"GET /x?sanbox%5Fview%5Ftoken={SECRET} HTTP/1.1",
    ],
)
def test_a_token_parameter_is_blanked_however_it_is_spelled(line: str) -> None:
    assert SECRET not in redact(line)
    assert "[redacted]" in redact(line)


def test_keys_are_blanked_plain_or_encoded() -> None:
    assert "abcdef" not in redact("GET /v1/computers/sbk_abcdef/stop")
    assert "abcdef" not in redact("GET /x?key=%73bk_abcdef")
    assert "abcdef" not in redact("GET /x?key=sbk%5Fabcdef")


def test_other_parameters_are_kept() -> None:
    line = "GET /x?tokens=1&a=token&b=%41 HTTP/1.1"
    assert redact(line) == line
