"""`sanbox exec`'s fast path (by name over the WebSocket, no typer, no httpx, no GET first) says
and does exactly what the typer app's `exec` does, against the real app.

The attack: a quicker exec that reports a missing computer, a wrong key or an unreachable server
differently, or exits with another status, breaks every script that reads them. Each case runs
twice as a user types it: `--env X=1` (the fast path takes it) and `--env=X=1` (it declines, so
the typer app runs the command the way it always did).
"""

from __future__ import annotations

import os
import pty
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sanbox import Sanbox

from .conftest import LiveServer

pytestmark = pytest.mark.component

ENTRY = "import sys; sys.argv[0] = 'sanbox'; from sanbox.cli.main import run; run()"
# `sanbox` through `main`, printing at exit whether httpx, websockets and typer were loaded (under
# `run` the process ends without the exit work that prints them)
_PRINT = "print(*(m in sys.modules for m in ('httpx', 'websockets', 'typer')), file=sys.stderr)"
LOADED = (
    f"import atexit, sys; atexit.register(lambda: {_PRINT}); sys.argv[0] = 'sanbox'; "
    "from sanbox.cli.main import main; main()"
)


def sanbox(
    url: str, key: str, tmp: Path, *args: str, stdin: str | None = None
) -> tuple[int, str, str]:
    env = {"SANBOX_URL": url, "SANBOX_API_KEY": key, "SANBOX_CONFIG": str(tmp / "absent.toml")}
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


def both_ways(
    url: str, key: str, tmp: Path, name: str, *cmd: str, stdin: str | None = None
) -> tuple[int, str, str]:
    fast = sanbox(url, key, tmp, "exec", "--env", "X=1", name, "--", *cmd, stdin=stdin)
    typed = sanbox(url, key, tmp, "exec", "--env=X=1", name, "--", *cmd, stdin=stdin)
    assert fast == typed
    return fast


def test_the_fast_exec_is_the_exec(live_server: LiveServer, short_tmp: Path) -> None:
    url, key = live_server.url, live_server.key
    with Sanbox(url, key) as client:
        box = client.computers.create(name="fast-one")
        script = 'echo "out $X"; echo err >&2; exit 5'
        assert both_ways(url, key, short_tmp, "fast-one", "sh", "-c", script) == (
            5,
            "out 1\n",
            "err\n",
        )
        assert both_ways(url, key, short_tmp, box.id, "true") == (0, "", "")
        assert both_ways(url, key, short_tmp, "fast-one", "sh", "-c", "kill -TERM $$")[0] == 143
        # messages past 64 KiB each way (the 64-bit frame length): stdin in, its lines out
        lines = "".join(f"line {i}\n" for i in range(40_000))
        big = both_ways(url, key, short_tmp, "fast-one", "sh", "-c", "cat; cat >&2", stdin=lines)
        assert big == (0, lines, "")
        missing = both_ways(url, key, short_tmp, "ghost", "true")
        assert missing[0] == 1 and "error (computer_not_found)" in missing[2]
        wrong_key = both_ways(url, "sbk_wrong", short_tmp, "fast-one", "true")
        assert wrong_key[0] == 1 and "error (unauthorized)" in wrong_key[2]
        box.stop()
        stopped = both_ways(url, key, short_tmp, "fast-one", "true")
        assert stopped[0] == 1 and "error (computer_not_running)" in stopped[2]
        box.delete()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        down = both_ways(nobody, key, short_tmp, "fast-one", "true")
    assert down[0] == 1 and "error (connection_failed)" in down[2]


def test_the_fast_exec_loads_no_http_or_websocket_library(
    live_server: LiveServer, short_tmp: Path
) -> None:
    """It did run the fast way (a fallback to the usual way would pass the test above too).
    Through `main`: under `run` the process ends without the exit work that prints them."""
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="light")
        env = {
            **os.environ,
            "SANBOX_URL": live_server.url,
            "SANBOX_API_KEY": live_server.key,
            "SANBOX_CONFIG": str(short_tmp / "absent.toml"),
        }
        argv = [sys.executable, "-c", LOADED, "exec", "light", "--", "echo", "hi"]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        client.computers.get("light").delete()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hi\n", "False False False\n")


def test_the_fast_shell_is_the_shell(live_server: LiveServer, short_tmp: Path) -> None:
    """`sanbox shell NAME` with its input piped (no terminal: a login shell without a PTY, as ssh
    gives none, which reads its commands and ends at the input's end; before, it waited forever
    in a PTY that never saw the end) the fast way and through the typer app
    (SANBOX_CLI_EAGER=1): the same exit status, what the shell printed, and the same errors."""
    url, key = live_server.url, live_server.key

    def shell(
        name: str, eager: bool, api_key: str = key, script: str = "echo made-$((6 * 7)); exit 3\n"
    ) -> tuple[int, str, str]:
        env = {
            **os.environ,
            "SANBOX_URL": url,
            "SANBOX_API_KEY": api_key,
            "SANBOX_CONFIG": str(short_tmp / "absent.toml"),
            "SANBOX_CLI_EAGER": "1" if eager else "",
        }
        proc = subprocess.run(
            [sys.executable, "-c", ENTRY, "shell", name],
            env=env,
            capture_output=True,
            text=True,
            input=script,
            timeout=120,
        )
        return proc.returncode, proc.stdout, proc.stderr

    with Sanbox(url, key) as client:
        client.computers.create(name="shelled")
        for eager in (False, True):
            code, out, _ = shell("shelled", eager)
            assert code == 3 and "made-42" in out, (eager, out)
            code, out, _ = shell("shelled", eager, script="echo ended-$((6 * 7))\n")  # no exit
            assert code == 0 and "ended-42" in out, (eager, out)
        for name, api_key, said in (
            ("ghost", key, "error (computer_not_found)"),
            ("shelled", "sbk_wrong", "error (unauthorized)"),
        ):
            fast, typed = (shell(name, eager, api_key) for eager in (False, True))
            assert fast == typed and fast[0] == 1 and said in fast[2], (fast, typed)
        client.computers.get("shelled").delete()


def test_an_exec_from_a_terminal_without_a_pty_gets_no_input(
    live_server: LiveServer, short_tmp: Path
) -> None:
    """`sanbox exec NAME -- cat` typed at a terminal: the command's input ends at once (as
    `docker exec` without -i), where it stayed open and the command waited forever."""
    env = {
        **os.environ,
        "SANBOX_URL": live_server.url,
        "SANBOX_API_KEY": live_server.key,
        "SANBOX_CONFIG": str(short_tmp / "absent.toml"),
    }
    terminal, its_end = pty.openpty()
    try:
        with Sanbox(live_server.url, live_server.key) as client:
            client.computers.create(name="typed")
            for eager in ("", "1"):
                argv = [sys.executable, "-c", ENTRY, "exec", "typed", "--", "cat"]
                proc = subprocess.run(
                    argv,
                    env={**env, "SANBOX_CLI_EAGER": eager},
                    stdin=its_end,
                    capture_output=True,
                    timeout=60,
                )
                assert (proc.returncode, proc.stdout) == (0, b""), proc
            client.computers.get("typed").delete()
    finally:
        os.close(terminal)
        os.close(its_end)


def test_an_exec_whose_input_stays_open_ends_with_the_commands_status(
    live_server: LiveServer, short_tmp: Path
) -> None:
    """`sleep 30 | sanbox exec --env=X=1 NAME -- true` (the typer app's way): the command ends,
    so does the CLI, with its status, while its input is still open (it aborted at exit, 134)."""
    env = {
        **os.environ,
        "SANBOX_URL": live_server.url,
        "SANBOX_API_KEY": live_server.key,
        "SANBOX_CONFIG": str(short_tmp / "absent.toml"),
    }
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="piped")
        for how in (["--env=X=1"], ["--env", "X=1"]):  # the typer app's way, the fast way
            argv = [sys.executable, "-c", ENTRY, "exec", *how, "piped", "--", "sh", "-c", "exit 7"]
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            try:
                code = proc.wait(timeout=60)  # its input still open: nothing written, not closed
                err = proc.stderr.read() if proc.stderr else b""
            finally:
                if proc.stdin:
                    proc.stdin.close()
                proc.kill()
                proc.wait()
            assert code == 7, (how, err)
        client.computers.get("piped").delete()
