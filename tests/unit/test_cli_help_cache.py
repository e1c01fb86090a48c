"""`sanbox ... --help` is rendered once by typer and then printed as kept while nothing it
depends on changes: the same bytes as the whole typer app prints, without loading typer or rich;
another terminal width, an edited source file, an unknown command or a cache that cannot be
written each behave as if there were no cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sanbox.cli import help_cache

from .test_cli_imports import PROBE

pytestmark = pytest.mark.unit


def sanbox(tmp_path: Path, *args: str, **env: str) -> tuple[object, list[str], str]:
    """Exit code, loaded modules and stdout of `sanbox ARGS` with its cache under `tmp_path`."""
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        env={
            **os.environ,
            "SANBOX_CONFIG": str(tmp_path / "config.toml"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "COLUMNS": "80",
            **env,
        },
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    result = json.loads(out.read_text())
    return result["code"], result["modules"], proc.stdout


@pytest.mark.parametrize("args", [["--help"], ["create", "--help"], ["snapshot", "ls", "--help"]])
def test_help_is_rendered_once_then_printed_as_kept_without_typer(
    tmp_path: Path, args: list[str]
) -> None:
    code, modules, first = sanbox(tmp_path, *args)
    assert code == 0 and "typer" in modules and "Usage: sanbox" in first
    code, modules, again = sanbox(tmp_path, *args)
    assert code == 0 and again == first
    loaded = {m.split(".")[0] for m in modules if m != "httpx._main"}  # None: blocked by main()
    assert not {"typer", "click", "rich", "httpx"} & loaded
    _, _, eager = sanbox(tmp_path, *args, SANBOX_CLI_EAGER="1")
    assert eager == first  # the whole typer app says the same


def test_another_terminal_width_renders_anew(tmp_path: Path) -> None:
    _, _, narrow = sanbox(tmp_path, "--help")
    code, modules, wide = sanbox(tmp_path, "--help", COLUMNS="120")
    assert code == 0 and "typer" in modules
    assert max(map(len, wide.splitlines())) > 80 >= max(map(len, narrow.splitlines()))
    _, modules, back = sanbox(tmp_path, "--help")  # the path's one file now holds the wide one
    assert back == narrow and "typer" in modules
    assert len(list((tmp_path / "cache" / "sanbox" / "help").iterdir())) == 1


def test_an_unknown_command_or_an_unwritable_cache_keeps_nothing(tmp_path: Path) -> None:
    code, _, _ = sanbox(tmp_path, "nosuch", "--help")
    assert code == 2 and not (tmp_path / "cache").exists()
    (tmp_path / "file").write_text("not a folder")
    for _ in range(2):
        code, modules, out = sanbox(tmp_path, "--help", XDG_CACHE_HOME=str(tmp_path / "file"))
        assert code == 0 and "Usage: sanbox" in out and "typer" in modules


def test_an_edited_source_file_changes_the_key(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "cli" / "app.py").write_text("x = 1\n")
    (tmp_path / "__pycache__" / "app.cpython-311.pyc").write_text("")
    before = help_cache._sources(tmp_path)
    assert before == [f"cli/app.py 6 {(tmp_path / 'cli' / 'app.py').stat().st_mtime_ns}\n"]
    os.utime(tmp_path / "cli" / "app.py", ns=(0, 10**9))
    assert help_cache._sources(tmp_path) != before


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["--help"], True),
        (["snapshot", "ls", "--help"], True),
        ([], False),
        (["ls"], False),
        (["ls", "--help", "x"], False),
        (["ls", "-l", "--help"], False),
        (["--url", "--help"], False),
        (["a", "b", "c", "d", "--help"], False),
    ],
)
def test_only_a_command_path_and_help_is_answered_from_the_cache(
    argv: list[str], wanted: bool
) -> None:
    assert help_cache.wanted(argv) is wanted
