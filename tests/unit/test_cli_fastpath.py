"""`sanbox exec`'s (and `sanbox shell`'s) fast path parses argv exactly as the typer app would,
or leaves it to typer.

The attack: a fast path that reads some argv differently from click (an option after the name,
a `--` inside the command, a repeated option) would run a different command than the one typed.
Each argv below goes through both: where the fast path takes it, the typer app must call the
command with the same arguments; where it declines, typer handles it as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from sanbox.cli import config, shell
from sanbox.cli.app import app
from sanbox.cli.fastpath import ExecArgs, parse_exec, parse_proxy

pytestmark = pytest.mark.unit

TAKEN = [
    ["exec", "box", "--", "true"],
    ["exec", "box", "true"],
    ["exec", "box", "--", "ls", "-l", "--", "x"],
    ["exec", "box", "echo", "a", "b"],
    ["exec", "--cwd", "/tmp", "box", "--", "pwd"],
    ["exec", "box", "echo", "--cwd", "/tmp", "hi"],  # click takes options between arguments
    ["exec", "box", "-e", "A=1", "--env", "B=x=y", "-u", "root", "--", "env"],
    ["exec", "box", "--env", "A=", "--user", "me", "cat", "-"],
    ["exec", "box", "--env", "A=1", "--env", "A=2", "--", "env"],
    ["shell", "box"],
    ["shell", "--", "box"],
]
DECLINED = [
    ["exec"],
    ["exec", "box"],
    ["exec", "box", "--"],
    ["exec", "--help"],
    ["exec", "box", "--help"],
    ["exec", "box", "ls", "-l"],
    ["exec", "box", "--env=A=1", "--", "env"],
    ["exec", "box", "-eA=1", "--", "env"],
    ["exec", "box", "--env", "nonsense", "--", "env"],
    ["exec", "box", "--env", "=x", "--", "env"],
    ["exec", "box", "--cwd", "/a", "--cwd", "/b", "--", "pwd"],
    ["exec", "box", "--cwd"],
    ["exec", "box", "--cwd", "--", "true"],
    ["exec", "box", "--nope", "x", "--", "true"],
    ["ls"],
    ["shell"],
    ["shell", "box", "more"],
    ["shell", "box", "--help"],
    ["shell", "--user", "root", "box"],
    ["shell", "-n", "box"],
    [],
]


def typer_reading(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    """What the typer app passes to the exec stream for `argv` (None if it never got there)."""
    seen: list[ExecArgs] = []

    async def stream(
        client: Any,
        name: str,
        cmd: list[str] | None,
        env: dict[str, str],
        cwd: str | None,
        user: str | None,
        pty: bool,
    ) -> int:
        seen.append(ExecArgs(name, cmd, env, cwd, user, pty))
        return 0

    monkeypatch.setattr(shell, "stream", stream)
    monkeypatch.setattr(config, "async_client", lambda: None)
    result = CliRunner().invoke(app, argv)
    return result.exit_code, seen[0] if seen else None


@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_the_fast_path_reads_argv_as_typer_does(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = parse_exec(argv)
    assert fast is not None
    assert typer_reading(argv, monkeypatch) == (0, fast)


@pytest.mark.parametrize("argv", DECLINED, ids=lambda a: " ".join(a) or "(none)")
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    assert parse_exec(argv) is None


PROXY_TAKEN = [["ssh-proxy", "box"], ["ssh-proxy", "--", "box"], ["ssh-proxy", "cmp_1"]]
PROXY_DECLINED = [
    ["ssh-proxy"],
    ["ssh-proxy", "box", "more"],
    ["ssh-proxy", "--help"],
    ["ssh-proxy", "box", "--help"],
    ["ssh-proxy", "-x", "box"],
    ["ssh", "box"],
    [],
]


@pytest.mark.parametrize("argv", PROXY_TAKEN, ids=" ".join)
def test_the_proxy_fast_path_reads_argv_as_typer_does(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sanbox.cli import ssh

    seen: list[str] = []

    async def proxy(client: Any, name: str) -> None:
        seen.append(name)

    monkeypatch.setattr(ssh, "proxy", proxy)
    monkeypatch.setattr(config, "async_client", lambda: None)
    result = CliRunner().invoke(app, argv)
    assert (result.exit_code, seen) == (0, [parse_proxy(argv)])


@pytest.mark.parametrize("argv", PROXY_DECLINED, ids=lambda a: " ".join(a) or "(none)")
def test_any_other_proxy_argv_is_left_to_typer(argv: list[str]) -> None:
    assert parse_proxy(argv) is None
