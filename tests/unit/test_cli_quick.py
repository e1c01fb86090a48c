"""The commands `sanbox` runs without typer (sanbox.cli.quick) read argv, call the API and print
exactly as the typer app's commands do, or leave the argv to the typer app.

The attack: a quicker command that reads an option differently, sends another request (a
missing `wait=true`, a label dropped, a body field the SDK leaves out), or prints a byte
otherwise (a table, JSON, an error line, an exit code) breaks the scripts that run it. Each argv
below runs both ways against the same fake API: the typer app through the SDK
(`config.TRANSPORT`), the quick way through `sanbox.cli.main.main` with its HTTP exchange
answered by the same handler; the requests made, the exit code, stdout and stderr must match.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from sanbox.cli import calls, config, main, quick
from sanbox.cli.app import app

pytestmark = pytest.mark.unit

BOX = {
    "id": "cmp_1",
    "name": "box",
    "state": "running",
    "org": "default",
    "template": "base",
    "vcpus": 2,
    "memory_mib": 1024,
    "disk_gib": 4,
    "labels": {"k": "v"},
    "created_at": "2026-01-02T03:04:05Z",
    "memory": "restored",
    "newer_field": "ignored",
}
SNAP = {
    "id": "snp_1",
    "computer_id": "cmp_1",
    "computer_name": "box",
    "name": "before",
    "memory": True,
    "size_bytes": 3 << 20,
    "created_at": "2026-01-02T03:04:05Z",
}
NOT_FOUND = {"error": {"code": "computer_not_found", "message": "no computer named ghost"}}
ROUTES: dict[tuple[str, str], tuple[int, Any]] = {
    ("GET", "/v1/computers"): (
        200,
        {
            "computers": [
                BOX,
                {**BOX, "id": "cmp_2", "name": "idle", "state": "stopped", "disk_gib": None},
            ]
        },
    ),
    ("GET", "/v1/computers/box"): (200, BOX),
    ("GET", "/v1/computers/cmp_1"): (200, BOX),
    ("GET", "/v1/computers/ghost"): (404, NOT_FOUND),
    ("POST", "/v1/computers"): (200, BOX),
    ("POST", "/v1/computers/cmp_1/stop"): (200, {**BOX, "state": "stopped", "memory": None}),
    ("POST", "/v1/computers/cmp_1/start"): (
        200,
        {**BOX, "memory": "lost", "memory_reason": "no snapshot"},
    ),
    ("POST", "/v1/computers/cmp_1/restart"): (200, BOX),
    ("POST", "/v1/computers/cmp_1/pause"): (
        409,
        {
            "error": {
                "code": "invalid_transition",
                "message": "cannot pause computer box while it is stopped",
            }
        },
    ),
    ("POST", "/v1/computers/cmp_1/resume"): (200, BOX),
    ("DELETE", "/v1/computers/cmp_1"): (200, {**BOX, "state": "deleted"}),
    ("GET", "/v1/computers/cmp_1/events"): (
        200,
        {
            "events": [
                {
                    "id": 1,
                    "type": "computer.created",
                    "message": "made [bold]here[/]",
                    "created_at": "2026-01-02T03:04:05Z",
                },
                {"id": 2, "type": "computer.running", "message": ""},
            ]
        },
    ),
    ("GET", "/v1/computers/cmp_1/console"): (200, {"lines": ["boot [ok]", "login:"]}),
    ("GET", "/v1/computers/cmp_1/network"): (200, {"allow": ["api.github.com", "*.pypi.org"]}),
    ("GET", "/v1/computers/cmp_1/ports"): (
        200,
        {
            "ports": [
                {"port": 8080, "public": False, "url": "http://8080-box.localhost:7070/"},
            ]
        },
    ),
    ("POST", "/v1/computers/cmp_1/snapshots"): (200, SNAP),
    ("POST", "/v1/computers/cmp_1/fork"): (
        200,
        {
            "computers": [
                {**BOX, "id": "cmp_3", "name": "box-1"},
                {**BOX, "id": "cmp_4", "name": "box-2"},
            ]
        },
    ),
    ("GET", "/v1/snapshots"): (200, {"snapshots": [SNAP, {**SNAP, "id": "snp_2", "name": None}]}),
    ("GET", "/v1/snapshots/before"): (200, SNAP),
    ("DELETE", "/v1/snapshots/before"): (200, SNAP),
    ("GET", "/v1/templates"): (
        200,
        {
            "templates": [
                {"name": "base", "builtin": True},
                {
                    "name": "notes",
                    "id": "tpl_1",
                    "state": "ready",
                    "base": "base",
                    "ready_snapshot": True,
                    "updated_at": "2026-01-02T03:04:05Z",
                },
            ]
        },
    ),
    ("GET", "/v1/templates/notes"): (200, {"name": "notes", "id": "tpl_1", "env": {"A": "1"}}),
    ("GET", "/v1/pools"): (
        200,
        {
            "pools": [
                {"template": "notes", "size": 2, "ready": 1, "starting": 1, "refill": "filling"},
            ]
        },
    ),
    ("GET", "/v1/secrets"): (
        200,
        {
            "secrets": [
                {
                    "id": "sec_1",
                    "name": "openai",
                    "hosts": ["api.openai.com"],
                    "header": "Authorization: Bearer {value}",
                    "version": 2,
                },
            ]
        },
    ),
    ("GET", "/v1/secrets/openai"): (200, {"id": "sec_1", "name": "openai", "hosts": ["a.b"]}),
    ("GET", "/v1/orgs"): (200, {"orgs": [{"id": "org_1", "name": "default"}]}),
    ("GET", "/v1/images"): (
        200,
        {
            "images": [
                {
                    "template": "base",
                    "build_id": "b1",
                    "kernel_release": "6.1",
                    "current": True,
                    "computers": 3,
                    "bytes": 5 << 30,
                },
            ]
        },
    ),
    ("POST", "/v1/console/links"): (200, {"url": "http://sanbox.test/console/link#t=abc"}),
    ("GET", "/v1/keys"): (
        200,
        {
            "keys": [
                {"id": "key_1", "org": "default", "prefix": "sbk_abcd", "admin": True},
                {
                    "id": "key_2",
                    "org": "default",
                    "name": "ci",
                    "expires_at": "2020-01-01T00:00:00+00:00",
                    "last_used_at": "2019-12-31T23:59:00+00:00",
                },
                {"id": "key_3", "org": "acme", "revoked_at": "2026-01-01T00:00:00Z"},
            ]
        },
    ),
    ("GET", "/v1/usage"): (
        200,
        {
            "org": "default",
            "group_by": "template",
            "start": "2026-01-01T00:00:00Z",
            "end": "2026-02-01T00:00:00Z",
            "groups": [
                {
                    "key": "tpl_1",
                    "name": "notes",
                    "usage": {"running_seconds": 7200, "vcpu_seconds": 14400, "cpu_seconds": 9.5},
                },
                {"key": "base", "usage": {"paused_seconds": 360, "egress_bytes": 1024}},
            ],
            "total": {"running_seconds": 7200, "paused_seconds": 360, "disk_gib_hours": 1.5},
        },
    ),
}

TAKEN = [
    ["ls"],
    ["ls", "--json"],
    ["ls", "--state", "running", "-l", "k=v", "--label", "a=b c"],
    ["get", "box"],
    ["get", "box", "--json"],
    ["get", "ghost"],
    ["get", "--", "box"],
    ["create"],
    ["create", "--json", "-n", "box", "-t", "notes"],
    [
        "create",
        "--from-snapshot",
        "before",
        "--cpus",
        "2",
        "--memory",
        "1024",
        "--disk",
        "8",
        "-e",
        "A=1",
        "--env",
        "A=2",
        "-l",
        "k=v",
        "--secret",
        "openai=OPENAI_KEY",
        "--secret",
        "gh",
        "--lifetime",
        "60",
        "--on-lifetime",
        "delete",
        "--region",
        "eu",
    ],
    ["create", "--idle-timeout", "0", "--max-running", "30"],
    ["stop", "box"],
    ["start", "box"],
    ["restart", "box"],
    ["pause", "box"],
    ["resume", "box"],
    ["stop", "ghost"],
    ["rm", "box"],
    ["rm", "ghost", "box"],
    ["rm", "-f", "ghost", "box"],
    ["logs", "box"],
    ["logs", "box", "--console", "-n", "5"],
    ["logs", "ghost"],
    ["snapshot", "ls"],
    ["snapshot", "ls", "--json"],
    ["snapshot", "get", "before"],
    ["snapshot", "get", "before", "--json"],
    ["snapshot", "create", "box", "--memory"],
    ["snapshot", "create", "box", "-n", "x", "--json"],
    ["snapshot", "rm", "before"],
    ["snapshot", "rm", "-f", "nope", "before"],
    ["snapshot", "rm", "nope"],
    ["fork", "box"],
    ["fork", "box", "-c", "2", "-n", "box", "--region", "eu", "--json"],
    ["template", "ls"],
    ["template", "ls", "--json"],
    ["template", "get", "notes"],
    ["pool", "ls"],
    ["secret", "ls"],
    ["secret", "get", "openai", "--json"],
    ["org", "ls"],
    ["org", "ls", "--json"],
    ["image", "ls"],
    ["image", "ls", "--json"],
    ["net", "show", "box"],
    ["net", "show", "box", "--json"],
    ["port", "ls", "box"],
    ["port", "ls", "box", "--json"],
    ["console"],
    ["config", "show"],
    ["key", "ls"],
    ["key", "ls", "--org", "acme", "--json"],
    ["usage"],
    ["usage", "--by", "template", "--from", "2026-01-01", "--to", "2026-02-01"],
    ["usage", "--org", "acme", "--json"],
]
DECLINED = [
    [],
    ["--help"],
    ["ls", "--help"],
    ["ls", "--state"],
    ["ls", "--state=running"],
    ["ls", "-l", "nonsense"],
    ["ls", "extra"],
    ["get"],
    ["get", "a", "b"],
    ["get", "-x", "a"],
    ["create", "--type", "docker"],
    ["create", "--cpus", "two"],
    ["create", "--cpus", "-1"],
    ["create", "--cpus", "02"],
    ["create", "--env", "=x"],
    ["create", "--secret", "a="],
    ["create", "--name", "a", "--name", "b"],
    ["stop"],
    ["rm"],
    ["logs", "box", "--follow"],
    ["fork", "box", "-c", "17"],
    ["fork", "box", "-c", "0"],
    ["snapshot"],
    ["snapshot", "--help", "ls"],
    ["snapshot", "ls", "-f"],
    ["template", "build"],
    ["key", "ls", "--all"],
    ["usage", "--csv"],
    ["update", "box", "--idle-timeout", "5"],
    ["config", "set", "--url", "x"],
    ["console", "--open=yes"],
    ["exec", "box", "--", "true"],
]


def answer(seen: list[tuple[object, ...]]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        query = sorted(request.url.params.multi_items())
        seen.append(
            (request.method, request.url.path, query, body, request.headers.get("authorization"))
        )
        status, payload = ROUTES.get(
            (request.method, request.url.path),
            (
                404,
                {
                    "error": {
                        "code": f"{request.url.path.split('/')[2][:-1]}_not_found",
                        "message": f"nothing at {request.url.path}",
                    },
                },
            ),
        )
        return httpx.Response(status, json=payload)

    return handler


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANBOX_URL", "http://sanbox.test")
    monkeypatch.setenv("SANBOX_API_KEY", "sbk_test")
    monkeypatch.setenv("SANBOX_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.delenv("SANBOX_CLI_EAGER", raising=False)
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)


def typer_run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[object, ...]:
    seen: list[tuple[object, ...]] = []
    monkeypatch.setattr(config, "TRANSPORT", httpx.MockTransport(answer(seen)))
    result = CliRunner().invoke(app, argv)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr, seen


def quick_run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[object, ...]:
    """`sanbox ARGV` through `main`, its requests answered by the same handler."""
    seen: list[tuple[object, ...]] = []
    handler = answer(seen)

    def exchange(host: str, port: int, head: bytes, body: bytes, timeout: float) -> Any:
        line, *fields = head.decode().split("\r\n")
        method, target, _ = line.split(" ")
        headers = dict(field.split(": ", 1) for field in fields if field)
        assert headers["Host"] == "sanbox.test" and headers["Connection"] == "close"
        response = handler(
            httpx.Request(method, f"http://{host}{target}", headers=headers, content=body)
        )
        return response.status_code, response.content

    monkeypatch.setattr(calls, "exchange", exchange)
    monkeypatch.setattr(sys, "argv", ["sanbox", *argv])
    with CliRunner().isolation() as (out, err, _):
        try:
            main.main()
            code: object = 0
        except SystemExit as exc:
            code = exc.code
        sys.stdout.flush()  # print()'s, as the runner does
        return code, out.getvalue().decode(), err.getvalue().decode(), seen


@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_a_quick_command_is_the_typer_command(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert quick.find(argv) is not None
    assert quick_run(argv, monkeypatch) == typer_run(argv, monkeypatch)


@pytest.mark.parametrize("argv", DECLINED, ids=lambda a: " ".join(a) or "(none)")
def test_anything_else_is_left_to_the_typer_app(argv: list[str]) -> None:
    assert quick.find(argv) is None


def test_every_quick_command_is_a_command_of_the_app() -> None:
    """No table entry shadows a typo or a command the app does not have."""
    import typer.main

    group = typer.main.get_command(app)
    for words in quick.COMMANDS:
        command = group
        for word in words:
            assert hasattr(command, "commands") and word in command.commands, words
            command = command.commands[word]


def test_the_timeouts_are_the_sdks() -> None:
    from sanbox.sdk import client, computer

    assert calls.TIMEOUT == client.DEFAULT_TIMEOUT
    assert calls.LONG == computer._LONG
