"""`sanbox host join` sends a one-time token and writes the control CA it is answered as this
host's trust anchor: over plain http, anyone on the path could take the token or hand the host
a CA of their own. It joins over https, or plain http to this machine only (a single-machine
fleet, the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sanbox.cli.app import app
from sanbox.cli.host import clear_join

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "server",
    [
        "https://control.example.com",
        "https://10.0.0.1:8000/",
        "http://127.0.0.1:8000",
        "http://127.8.9.1",
        "http://[::1]:8000",
        "http://localhost:8000",
        "http://LOCALHOST.:8000",
    ],
)
def test_https_or_loopback_is_taken(server: str) -> None:
    assert clear_join(server) is None


@pytest.mark.parametrize(
    "server",
    [
        "http://control.example.com",
        "http://10.0.0.1:8000",
        "http://[::ffff:10.0.0.1]",
        "http://localhost.example.com",
        "http://127.0.0.1.example.com",
        "ftp://127.0.0.1",
        "control.example.com:8000",
        "https://",
    ],
)
def test_anything_else_is_refused(server: str) -> None:
    assert clear_join(server) is not None


def test_a_plain_http_join_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    data = tmp_path / "data"
    argv = ["host", "join", "--server", "http://control.example.com:8000", "--token", "sbj_x"]
    argv += ["--name", "h1", "--region", "eu", "--address", "10.0.0.2", "--data-dir", str(data)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error (insecure_server) --server http://control.example.com:8000 would send the join "
        "token and the control CA in clear: use https://control.example.com:8000"
    )
    assert not data.exists()  # no key made, nothing written
