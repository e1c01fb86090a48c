"""Every `sanbox` command starts fast: the CLI loads typer, rich and the SDK, never the server;
the common commands load neither typer nor httpx, and any other loads its own module only.

Importing the server (FastAPI, SQLAlchemy, alembic, the control plane, the store, the host
runtime) costs 1.5-2 s; a client command that did it would spend that before every `sanbox exec`.
Server-side commands (`server`, `image build`, `doctor`) import it inside the command. Typer (with
pydantic), httpx and every command's module cost ~0.2-0.3 s more: the quick commands
(sanbox.cli.quick) skip them all, the others load only their module's (sanbox.cli.registry). Each
check runs a fresh interpreter: this one has long since loaded everything.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sanbox.cli import quick, registry

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
        m
        for m in modules
        if m.split(".")[0] in SERVER_SIDE
        or any(m == p or m.startswith(p + ".") for p in SERVER_PACKAGES)
    ]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_sanbox(
    tmp_path: Path,
    *args: str,
    url: str | None = None,
    stdin: str | None = None,
    path: str | None = None,
) -> tuple[object, list[str], str]:
    """Exit code, loaded modules and stderr of `sanbox ARGS` against `url`, by default a server
    that is not there; `stdin` its standard input (none by default); `path` its PATH."""
    out = tmp_path / "modules.json"
    env = {
        **os.environ,
        "SANBOX_URL": url or f"http://127.0.0.1:{closed_port()}",
        "SANBOX_API_KEY": "sbk_test",
        "SANBOX_CONFIG": str(tmp_path / "config.toml"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # no help kept from another test
        **({"PATH": path} if path is not None else {}),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        **({"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}),
        timeout=60,
    )
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
    """`sanbox exec NAME -- CMD`, `sanbox shell NAME` and `sanbox ssh-proxy NAME` run on the
    fast path: no typer (it loads pydantic to convert parameters: ~0.2 s of every exec), nor
    httpx's own command-line client."""
    code, modules, stderr = run_sanbox(tmp_path, "exec", "demo", "--", "true")
    assert code == 1 and "error (connection_failed)" in stderr, stderr
    loaded = {m.split(".")[0] for m in modules}
    assert not loaded & {"typer", "click", "pydantic", "pygments"}  # click, pygments: httpx's
    for args in (("shell", "demo"), ("ssh-proxy", "demo")):  # a login shell; ssh's ProxyCommand
        code, modules, stderr = run_sanbox(tmp_path, *args)
        assert code == 1 and "error (connection_failed)" in stderr, stderr
        assert not {m.split(".")[0] for m in modules} & {"typer", "click", "pydantic", "pygments"}
    code, modules, stderr = run_sanbox(tmp_path, "exec", "demo", "--help")
    assert code == 0 and "typer" in modules  # anything else: the typer app, as always


# The API as far as the quick commands read it: every request gets this one object, which each
# record type reads for the fields it knows, and each list (or link) finds its key in.
ANYTHING = {
    "id": "cmp_1",
    "name": "demo",
    "state": "running",
    "computer_id": "cmp_1",
    "template": "base",
    "url": "http://sanbox.test/console/link#t=x",
    "computers": [],
    "snapshots": [],
    "templates": [],
    "pools": [],
    "secrets": [],
    "orgs": [],
    "images": [],
    "allow": [],
    "ports": [],
    "events": [],
    "lines": [],
    "keys": [],
    "org": "default",
    "group_by": "computer",
    "groups": [],
    "total": {},
    "start": "2026-01-01T00:00:00Z",
    "end": "2026-02-01T00:00:00Z",
    "port": 8080,
    "public": False,
    "expires_at": "2026-01-01T01:00:00Z",
    "size": 1,
    "secret": "demo",
    "computer": "cmp_1",
    "placeholder": "sbx_ph_x",
    "bindings": [],
    "removed_steps": 0,
    "kept_steps": 0,
    "freed_bytes": 0,
    "records": [],
    "removed": [],
    "token": "sbj_x",
    "hosts": [],
    "jobs": [],
    "region": "eu",
    "address": "10.0.0.1:7071",
    "epoch": 1,
    "lease_until": "2026-01-01T00:00:30Z",
    "hypervisor": "qemu",
    "accel": "kvm",
    "vcpus": 1,
    "memory_mib": 512,
    "disk_bytes": 1,
    "user": "root",
    "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemo",
}
# Arguments a quick command needs beyond a "demo" for each of its arguments' names: a number,
# or an option it cannot go without.
ARGV = {
    ("port", "publish"): ["demo", "8080"],
    ("port", "unpublish"): ["demo", "8080"],
    ("port", "view-link"): ["demo", "8080"],
    ("pool", "set"): ["demo", "--size", "1"],
    ("update",): ["demo", "--lifetime", "0"],
    ("host", "token"): ["--region", "demo"],
    ("host", "forget"): ["demo", "--confirm-dead"],
    ("config", "set"): ["--api-key", "sbk_demo"],
    ("cp",): ["demo:/etc/hosts", "/dev/null"],  # a computer's file out, off a terminal
    ("secret", "set"): ["demo", "--host", "a.b", "--value-stdin"],
}
STDIN: dict[tuple[str, ...], str] = {("secret", "set"): "value\n"}
FRAMEWORK = {"typer", "click", "pydantic", "httpx", "httpcore", "anyio", "websockets"}
COMMAND_MODULES = {f"sanbox.cli.{module}" for module in registry.MODULES}


@pytest.fixture(scope="module")
def answering() -> Iterator[str]:
    """A stand-in API on a free port answering `ANYTHING` to every request, for the module's
    tests; its URL."""

    class Answer(BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(ANYTHING).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "words",
    [words for words in quick.COMMANDS if words != ("ssh",)],  # it ends by becoming ssh: below
    ids=" ".join,
)
def test_a_quick_command_loads_neither_typer_nor_httpx(
    tmp_path: Path, words: tuple[str, ...], answering: str
) -> None:
    """Run to its end against an API that answers: no command-line framework, no httpx (nor its
    event loop), no command's typer module."""
    argv = [*words, *ARGV.get(words, ["demo"] * len(quick.COMMANDS[words].grammar.arguments))]
    code, modules, stderr = run_sanbox(tmp_path, *argv, url=answering, stdin=STDIN.get(words))
    assert code == 0, stderr
    loaded = {m.split(".")[0] for m in modules if m != "httpx._main"}  # main's None, not httpx
    assert not loaded & FRAMEWORK
    assert not set(modules) & COMMAND_MODULES
    assert server_side(modules) == []


def test_ssh_runs_to_ssh_without_the_command_line_framework(tmp_path: Path, answering: str) -> None:
    """`sanbox ssh NAME` lets the key in and writes its files, then becomes ssh: here no ssh is
    on the PATH, so it stops there and says so (the user's key made before: no ssh-keygen)."""
    keys = tmp_path / "ssh"
    keys.mkdir()
    (keys / "id_ed25519").write_text("private\n")
    (keys / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMe sanbox\n")
    code, modules, stderr = run_sanbox(tmp_path, "ssh", "demo", url=answering, path="")
    assert code == 1 and "error (ssh_unavailable) ssh not found" in stderr, stderr
    assert (keys / "sanbox-demo.config").exists() and "sanbox-demo" in (
        keys / "known_hosts"
    ).read_text()
    loaded = {m.split(".")[0] for m in modules if m != "httpx._main"}
    assert not loaded & FRAMEWORK
    assert not set(modules) & COMMAND_MODULES


@pytest.mark.parametrize(
    ("args", "own"),
    [
        (["cp", "big-or-absent", "demo:/tmp/"], {"files", "config"}),
        (["secret", "set", "--help"], {"secret", "config"}),
        (["ls", "--help"], {"computer", "config", "secret", "template"}),
        (["template", "logs", "demo"], {"template", "config"}),
        (["server", "--help"], {"server"}),
    ],
)
def test_any_other_command_loads_its_own_module(
    tmp_path: Path, args: list[str], own: set[str]
) -> None:
    """Not the whole app: the command's module and those it imports itself."""
    code, modules, stderr = run_sanbox(tmp_path, *args)
    assert code in (0, 1), stderr
    assert {m.removeprefix("sanbox.cli.") for m in modules if m in COMMAND_MODULES} == own
    assert "sanbox.cli.app" not in modules


def test_help_lists_every_command_from_the_whole_app(tmp_path: Path) -> None:
    code, modules, stderr = run_sanbox(tmp_path, "--help")
    assert code == 0 and "sanbox.cli.app" in modules, stderr


def test_the_registry_names_what_each_module_registers() -> None:
    """A command missing from `registry.MODULES` would run in the whole app (slow, but right);
    one listed under the wrong module would not be found when run alone."""
    import typer.main

    for module, names in registry.MODULES.items():
        alone = typer.main.get_group(registry.typer_app([module]))
        assert set(alone.commands) == set(names), module
    whole = typer.main.get_group(registry.typer_app(list(registry.MODULES)))
    assert set(whole.commands) == {name for names in registry.MODULES.values() for name in names}
