"""Every `sanbox` command starts fast: the CLI loads typer, rich and the SDK, never the server.

Importing the server (FastAPI, SQLAlchemy, alembic, the control plane, the store, the host
runtime) costs 1.5-2 s; a client command that did it would spend that before every `sanbox exec`.
Server-side commands (`server`, `image build`, `doctor`) import it inside the command. Each check
runs a fresh interpreter: this one has long since loaded everything.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVER_SIDE = ("fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", "mcp")
SERVER_PACKAGES = ("sanbox.api", "sanbox.control", "sanbox.store", "sanbox.host", "sanbox.mcp")

# Runs `sanbox ARGS...` as the console script does, then writes the loaded modules to a file.
PROBE = """
import json, sys
out, sys.argv = sys.argv[1], ["sanbox", *sys.argv[2:]]
try:
    from sanbox.cli.main import main
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(out, "w") as file:
    json.dump({"code": code, "modules": sorted(sys.modules)}, file)
"""


def server_side(modules: list[str]) -> list[str]:
    return [
        m for m in modules
        if m.split(".")[0] in SERVER_SIDE
        or any(m == p or m.startswith(p + ".") for p in SERVER_PACKAGES)
    ]  # fmt: skip


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_sanbox(tmp_path: Path, *args: str) -> tuple[object, list[str], str]:
    """Exit code, loaded modules and stderr of `sanbox ARGS` against a server that is not there."""
    out = tmp_path / "modules.json"
    env = {
        **os.environ,
        "SANBOX_URL": f"http://127.0.0.1:{closed_port()}",
        "SANBOX_API_KEY": "sbk_test",
        "SANBOX_CONFIG": str(tmp_path / "config.toml"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert out.exists(), proc.stderr
    result = json.loads(out.read_text())
    return result["code"], result["modules"], proc.stderr


@pytest.mark.parametrize("module", ["sanbox.cli.main", "sanbox.sdk", "sanbox"])
def test_importing_the_cli_or_the_sdk_loads_no_server_code(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = json.loads(proc.stdout)
    assert server_side(modules) == []
    # nor pydantic (typer loads it to convert a command's parameters; sanbox never does), nor
    # websockets (only exec and shell open one)
    assert "pydantic" not in modules and "websockets" not in modules


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["server", "--help"],
        ["image", "--help"],
        ["doctor", "--help"],
    ],
)
def test_help_loads_no_server_code(tmp_path: Path, args: list[str]) -> None:
    code, modules, stderr = run_sanbox(tmp_path, *args)
    assert code == 0, stderr
    assert server_side(modules) == []


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["exec", "demo", "--", "true"],
        ["image", "ls"],
        ["net", "show", "demo"],
    ],
)
def test_client_commands_reach_the_server_without_loading_it(
    tmp_path: Path, args: list[str]
) -> None:
    """The command runs as far as its request (refused: no server listens) on the CLI alone."""
    code, modules, stderr = run_sanbox(tmp_path, *args)
    assert code == 1 and "error (connection_failed)" in stderr, stderr
    assert server_side(modules) == []


def test_a_host_error_is_still_one_line() -> None:
    """A server-side command's host error, imported only by that command, is reported like any
    other: one line with its code, no traceback."""
    probe = """
import sys
from sanbox.cli.main import app, main

@app.command("boom")
def boom() -> None:
    from sanbox.host.errors import LayoutError
    raise LayoutError("/nowhere is outside the data dir")

sys.argv = ["sanbox", "boom"]
main()
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "error (invalid_path) /nowhere is outside the data dir" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_plain_exec_skips_the_command_line_framework(tmp_path: Path) -> None:
    """`sanbox exec NAME -- CMD` runs on the fast path: no typer (it loads pydantic to convert
    parameters: ~0.2 s of every exec), nor httpx's own command-line client."""
    code, modules, stderr = run_sanbox(tmp_path, "exec", "demo", "--", "true")
    assert code == 1 and "error (connection_failed)" in stderr, stderr
    loaded = {m.split(".")[0] for m in modules}
    assert not loaded & {"typer", "click", "pydantic", "pygments"}  # click, pygments: httpx's
    code, modules, stderr = run_sanbox(tmp_path, "exec", "demo", "--help")
    assert code == 0 and "typer" in modules  # anything else: the typer app, as always
