"""The commands `sanbox` runs without typer (sanbox.cli.quick) read argv, call the API and print
exactly as the typer app's commands do, or leave the argv to the typer app.

The attack: a quicker command that reads an option differently, sends another request (a
missing `wait=true`, a label dropped, a body field the SDK leaves out, another timeout, the
requests of a command of several in another order), or prints a byte otherwise (a table, JSON,
an error line, an exit code) breaks the scripts that run it. Each argv below runs both ways
against the same fake API: the typer app through the SDK (`config.TRANSPORT`), the quick way
through `sanbox.cli.main.main` with its HTTP exchange answered by the same handler; the requests
made (with their timeouts), the exit code, stdout and stderr must match.
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
PORT = {"port": 8080, "public": False, "url": "http://8080-box.localhost:7070/"}
BINDING = {
    "secret": "openai",
    "computer": "cmp_1",
    "placeholder": "sbx_ph_[bold]1[/]",
    "env": "OPENAI_API_KEY",
    "created_at": "2026-01-02T03:04:05Z",
}
KEY = {"id": "key_4", "org": "default", "name": "ci", "prefix": "sbk_efgh", "admin": True}
QUOTA = {
    "org": "default",
    "limits": {"running": 4, "vcpus": None, "memory_mib": 8192, "disk_gib": 100, "snapshots": 9},
    "use": {"running": 1, "memory_mib": 512},
}
HOST = {
    "name": "h1",
    "region": "eu",
    "address": "10.0.0.1:7071",
    "state": "up",
    "epoch": 3,
    "lease_until": "2026-01-02T03:04:35Z",
    "hypervisor": "qemu",
    "accel": "kvm",
    "vcpus": 16,
    "memory_mib": 65536,
    "disk_bytes": 1 << 40,
    "alloc_vcpus": 2,
    "layers": ["base:b1"],
}
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
    ("POST", "/v1/computers/cmp_1/ssh-keys"): (
        200,
        {"user": "root", "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBox x", "added": True},
    ),
    ("GET", "/v1/events"): (  # what follows (SSE), another computer's among it; then it ends
        200,
        "".join(
            f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n"
            for e in (
                {"id": 3, "type": "computer.stopped", "computer_id": "cmp_1", "message": "bye"},
                {"id": 4, "type": "computer.created", "computer_id": "cmp_2", "message": "x"},
            )
        ).encode(),
    ),
    ("PUT", "/v1/computers/cmp_1/files"): (200, {"path": "/tmp/x", "size": 7}),
    ("GET", "/v1/computers/cmp_1/files/stat"): (
        200,
        {"name": "hosts", "path": "/etc/hosts", "type": "file", "size": 9, "mode": "0644"},
    ),
    ("GET", "/v1/computers/cmp_1/files"): (200, b"\x00guest\xff\n"),
    ("GET", "/v1/computers/cmp_1/network"): (200, {"allow": ["api.github.com", "*.pypi.org"]}),
    ("PUT", "/v1/computers/cmp_1/network"): (200, {"allow": ["api.github.com"], "closed_flows": 2}),
    ("POST", "/v1/computers/cmp_1/ports"): (200, PORT),
    ("DELETE", "/v1/computers/cmp_1/ports/8080"): (204, None),
    ("DELETE", "/v1/computers/cmp_1/ports/9090"): (
        404,
        {"error": {"code": "not_found", "message": "port 9090 of box is not published"}},
    ),
    ("POST", "/v1/computers/cmp_1/ports/8080/view-link"): (
        200,
        {"url": "http://8080-box.localhost:7070/?view=v1", "expires_at": "2026-01-02T04:04:05Z"},
    ),
    ("PATCH", "/v1/computers/cmp_1"): (
        200,
        {**BOX, "idle_timeout": 300, "lifetime": 3600, "on_lifetime": "delete"},
    ),
    ("POST", "/v1/fleet/computers/cmp_1/move"): (200, {**BOX, "state": "stopped"}),
    ("POST", "/v1/fleet/snapshots/snp_1/move"): (200, SNAP),
    ("PUT", "/v1/computers/box/secrets/openai"): (200, BINDING),
    ("DELETE", "/v1/computers/box/secrets/openai"): (200, {**BINDING, "env": None}),
    ("DELETE", "/v1/computers/box/secrets/gh"): (
        404,
        {"error": {"code": "binding_not_found", "message": "gh is not bound to box"}},
    ),
    ("GET", "/v1/computers/box/secrets"): (
        200,
        {"bindings": [BINDING, {**BINDING, "secret": "gh", "env": None, "created_at": None}]},
    ),
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
    ("DELETE", "/v1/templates/notes"): (200, {"name": "notes", "id": "tpl_1"}),
    ("POST", "/v1/build-cache/prune"): (
        200,
        {"removed_steps": 3, "kept_steps": 7, "freed_bytes": 5 << 20},
    ),
    ("PUT", "/v1/pools/notes"): (
        200,
        {"template": "notes", "size": 3, "ready": 1, "starting": 2, "refill": "filling"},
    ),
    ("PUT", "/v1/pools/ghost"): (
        404,
        {"error": {"code": "template_not_found", "message": "no template named ghost"}},
    ),
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
    ("PUT", "/v1/secrets/openai"): (
        200,
        {"id": "sec_1", "name": "openai", "hosts": ["a.b", "*.c"], "version": 2, "header": None},
    ),
    ("DELETE", "/v1/secrets/openai"): (200, {"id": "sec_1", "name": "openai", "hosts": ["a.b"]}),
    ("GET", "/v1/orgs"): (200, {"orgs": [{"id": "org_1", "name": "default"}]}),
    ("POST", "/v1/orgs"): (200, {"id": "org_2", "name": "acme [bold]co[/]"}),
    ("GET", "/v1/orgs/default/quota"): (200, QUOTA),
    ("PUT", "/v1/orgs/default/quota"): (200, {**QUOTA, "limits": {"running": 8}}),
    ("GET", "/v1/orgs/acme/quota"): (
        403,
        {"error": {"code": "forbidden", "message": "another org's quota: a host-admin key"}},
    ),
    ("GET", "/v1/orgs/default/regions"): (200, {"org": "default", "home": "eu", "allowed": ["us"]}),
    ("PUT", "/v1/orgs/default/regions"): (200, {"org": "default", "allowed": []}),
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
    ("POST", "/v1/images/prune"): (
        200,
        {
            "removed": [
                {"template": "base", "build_id": "b0", "kernel_release": "6.1", "bytes": 3 << 30},
            ]
        },
    ),
    ("POST", "/v1/console/links"): (200, {"url": "http://sanbox.test/console/link#t=abc"}),
    ("POST", "/v1/keys"): (
        200,
        {**KEY, "key": "sbk_efgh_secret", "expires_at": "2026-02-01T00:00:00+00:00"},
    ),
    ("DELETE", "/v1/keys/key_2"): (200, {**KEY, "revoked_at": "2026-01-02T03:04:05Z"}),
    ("GET", "/v1/audit"): (
        200,
        {
            "records": [
                {
                    "id": 7,
                    "action": "POST /v1/computers/{ref}/stop",
                    "status": 200,
                    "time": "2026-01-02T03:04:05.123456Z",
                    "org": "default",
                    "key_prefix": "sbk_abcd",
                    "target": {"ref": "box"},
                    "client": "127.0.0.1",
                },
                {"id": 8, "action": "DELETE /v1/keys/{key_id}", "status": 404, "code": "nf"},
            ]
        },
    ),
    ("POST", "/v1/fleet/tokens"): (200, {"token": "sbj_12345"}),
    ("GET", "/v1/fleet/hosts"): (200, {"hosts": [HOST, {**HOST, "name": "h2", "state": "lost"}]}),
    ("GET", "/v1/fleet/jobs"): (
        200,
        {"jobs": [{"name": "reconciler", "node": "api-1"}, {"name": "idle", "node": None}]},
    ),
    ("GET", "/v1/fleet/hosts/h1"): (200, HOST),
    ("GET", "/v1/fleet/hosts/ghost"): (
        404,
        {"error": {"code": "host_not_found", "message": "no host named ghost"}},
    ),
    ("POST", "/v1/fleet/hosts/h1/drain"): (200, {**HOST, "state": "draining"}),
    ("POST", "/v1/fleet/hosts/h1/undrain"): (200, HOST),
    ("POST", "/v1/fleet/hosts/h1/forget"): (200, {"computers": ["cmp_1", "cmp_2"]}),
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
    ["usage", "--csv"],
    ["usage", "--by", "day", "--csv", "--json"],
    ["get", ".."],
    ["update", "box", "--idle-timeout", "300"],
    [
        "update",
        "box",
        "--lifetime",
        "3600",
        "--on-lifetime",
        "delete",
        "--max-running",
        "0",
    ],
    ["update", "ghost", "--lifetime", "0"],
    ["move", "box"],
    ["move", "box", "--to", "h2"],
    ["snapshot", "move", "before", "--to", "h2"],
    ["snapshot", "move", "nope"],
    ["net", "allow", "box", "example.com", "api.github.com", "*.pypi.org"],
    ["net", "deny", "box", "*.pypi.org", "--", "-odd"],
    ["net", "allow", "ghost", "example.com"],
    ["port", "publish", "box", "8080"],
    ["port", "publish", "box", "8080", "--public"],
    ["port", "publish", "ghost", "1"],
    ["port", "unpublish", "box", "8080"],
    ["port", "unpublish", "box", "9090"],
    ["port", "view-link", "box", "8080"],
    ["port", "view-link", "box", "8080", "--expires-in", "600"],
    ["template", "get", "notes", "--region", "eu", "--json"],
    ["template", "rm", "notes"],
    ["template", "rm", "ghost", "notes"],
    ["template", "rm", "-f", "ghost", "notes", "--region", "eu"],
    ["template", "prune"],
    ["template", "prune", "--json"],
    ["pool", "set", "notes", "--size", "3"],
    ["pool", "set", "notes", "-s", "0", "--json"],
    ["pool", "set", "ghost", "-s", "1"],
    ["secret", "rm", "openai"],
    ["secret", "rm", "nope", "openai"],
    ["secret", "rm", "--force", "nope", "openai"],
    ["secret", "bind", "openai", "box", "-e", "OPENAI_API_KEY"],
    ["secret", "bind", "openai", "box", "--json"],
    ["secret", "unbind", "openai", "box"],
    ["secret", "unbind", "gh", "box"],
    ["secret", "bindings", "box"],
    ["secret", "bindings", "box", "--json"],
    ["org", "create", "acme"],
    ["org", "quota", "default"],
    ["org", "quota", "default", "--json"],
    ["org", "quota", "default", "--running", "8", "--vcpus", "none", "--disk", " 12 "],
    ["org", "quota", "acme"],
    ["org", "regions", "default"],
    ["org", "regions", "default", "--home", "none"],
    ["org", "regions", "default", "--allow", "none", "--allow", "us"],
    ["key", "create"],
    ["key", "create", "--name", "ci", "--admin", "--expires-in", "1d12h", "--org", "acme"],
    ["key", "create", "--host-admin", "--expires-at", "2027-01-31T12:00Z", "--json"],
    ["key", "revoke", "key_2"],
    ["key", "revoke", "key_9"],
    ["audit"],
    ["audit", "-n", "3", "--after", "5", "--org", "acme"],
    ["audit", "--limit", "1000", "--json"],
    ["image", "prune"],
    ["host", "token", "--region", "eu"],
    ["host", "token", "--ttl", "15m", "--region", "eu"],
    ["host", "token", "--region", "eu", "--host", "h1"],
    ["host", "ls"],
    ["host", "jobs"],
    ["host", "get", "h1"],
    ["host", "get", "ghost"],
    ["host", "drain", "h1"],
    ["host", "drain", "h1", "--undo"],
    ["host", "forget", "h1", "--confirm-dead"],
    ["config", "set", "--url", "http://elsewhere.test", "--api-key", "sbk_other"],
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
    ["update", "box"],
    ["update", "box", "--idle-timeout", "-1"],
    ["update", "box", "--lifetime=5"],
    ["move"],
    ["move", "box", "--to"],
    ["snapshot", "move", "before", "--to", "a", "--to", "b"],
    ["net", "allow", "box"],
    ["net", "allow", "box", "--json", "x"],
    ["net", "deny", "box", "-x"],
    ["port", "publish", "box"],
    ["port", "publish", "box", "0"],
    ["port", "publish", "box", "65536"],
    ["port", "publish", "box", "080"],
    ["port", "publish", "box", "http"],
    ["port", "publish", "box", "8080", "--public=yes"],
    ["port", "unpublish", "box", "8080", "extra"],
    ["port", "view-link", "box", "8080", "--expires-in", "soon"],
    ["port", "view-link", "box", "8080", "--expires-in"],
    ["template", "get", "notes", "--region"],
    ["template", "rm"],
    ["template", "logs", "notes"],
    ["template", "prune", "-f"],
    ["pool", "set", "notes"],
    ["pool", "set", "notes", "-s", "-1"],
    ["pool", "set", "notes", "--size", "two"],
    ["secret", "rm"],
    ["secret", "bind", "openai"],
    ["secret", "bind", "openai", "box", "--env"],
    ["secret", "unbind", "openai", "box", "--json"],
    ["secret", "bindings"],
    ["org", "create"],
    ["org", "create", "a", "b"],
    ["org", "quota", "default", "--running", "many"],
    ["org", "quota", "default", "--running", "-"],
    ["org", "quota", "default", "--memory", "²"],
    ["org", "regions", "default", "--home"],
    ["key", "create", "--expires-in", "soon"],
    ["key", "create", "--expires-in", "0s"],
    ["key", "create", "--name", "a", "--name", "b"],
    ["key", "revoke"],
    ["audit", "-n", "0"],
    ["audit", "-n", "1001"],
    ["audit", "--after", "-1"],
    ["image", "build"],
    ["image", "prune", "--json"],
    ["host", "token"],
    ["host", "token", "--region", "eu", "--ttl", "forever"],
    ["host", "join", "--server", "http://x"],
    ["host", "get", "a b"],
    ["host", "get", "a?b"],
    ["host", "forget", "h1"],
    ["host", "drain", "h1", "--undo", "x"],
    ["ssh-config", "box", "more"],
    ["ssh", "box", "--", "-v"],
    ["ssh", "box", "uname"],
    ["ssh", "-L", "8080:localhost:80", "box"],
    ["config", "set"],
    ["config", "set", "--url"],
    ["console", "--open=yes"],
    ["exec", "box", "--", "true"],
]


def answer(seen: list[tuple[object, ...]]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers.get("content-type") == "application/octet-stream":
            body: object = bytes(request.content)  # a file's bytes, as uploaded
        else:
            body = json.loads(request.content) if request.content else None
        query = sorted(request.url.params.multi_items())
        timeout = request.extensions["timeout"]["read"]
        authorization = request.headers.get("authorization")
        seen.append((request.method, request.url.path, query, body, timeout, authorization))
        if ("format", "csv") in query:  # the usage report as CSV (a terminal escape in it)
            return httpx.Response(200, text="key,running_hours\nbox,\x1b[1m2.0\x1b[0m\n")
        kind = request.url.path.split("/")[2:3]  # `computers` of /v1/computers/...
        status, payload = ROUTES.get(
            (request.method, request.url.path),
            (
                404,
                {
                    "error": {
                        "code": f"{kind[0][:-1]}_not_found" if kind else "not_found",
                        "message": f"nothing at {request.url.path}",
                    },
                },
            ),
        )
        if payload is None:
            return httpx.Response(status)
        if isinstance(payload, bytes):  # a file's bytes, as downloaded
            return httpx.Response(status, content=payload)
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


# a run's exit code (SystemExit's), stdout, stderr and the requests it made
Ran = tuple[object, str, str, list[tuple[object, ...]]]


def typer_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, stdin: str | bytes | None = None
) -> Ran:
    seen: list[tuple[object, ...]] = []
    monkeypatch.setattr(config, "TRANSPORT", httpx.MockTransport(answer(seen)))
    result = CliRunner().invoke(app, argv, input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr, seen


def quick_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, stdin: str | bytes | None = None
) -> Ran:
    """`sanbox ARGV` through `main`, its requests answered by the same handler."""
    seen: list[tuple[object, ...]] = []
    handler = answer(seen)

    def exchange(
        host: str, port: int, head: bytes, body: bytes, timeout: float, sink: Any = None
    ) -> Any:
        line, *fields = head.decode().split("\r\n")
        method, target, _ = line.split(" ")
        headers = dict(field.split(": ", 1) for field in fields if field)
        assert headers["Host"] == "sanbox.test" and headers["Connection"] == "close"
        request = httpx.Request(method, f"http://{host}{target}", headers=headers, content=body)
        request.extensions["timeout"] = {"read": timeout}
        response = handler(request)
        if sink is not None and response.is_success:
            for at in range(0, len(response.content), 3):  # as it arrives: a piece at a time
                sink(response.content[at : at + 3])
            return response.status_code, b""
        return response.status_code, response.content

    monkeypatch.setattr(calls, "exchange", exchange)
    monkeypatch.setattr(sys, "argv", ["sanbox", *argv])
    with CliRunner().isolation(input=stdin) as (out, err, _):
        try:
            main.main()
            code: object = 0
        except SystemExit as exc:
            code = exc.code
        sys.stdout.flush()  # print()'s, as the runner does
        sys.stderr.flush()
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


def test_a_host_name_is_one_path_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`host get "a?b"` asks for the host `a?b`, not for `a` with a query (nor `a` then `b`)."""
    for name in ("a?b", "a/b", "a#b"):
        _, _, _, seen = typer_run(["host", "get", name], monkeypatch)
        assert [(s[0], s[1], s[2]) for s in seen] == [("GET", f"/v1/fleet/hosts/{name}", [])]


def test_cp_is_the_typer_command_where_it_draws_no_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small local file into a computer (in one request), a computer's file out (written as it
    arrives; no terminal here), and cp's mistakes: the same requests, output and local file."""
    from sanbox.cli.grammars import BIG_FILE

    small = tmp_path / "note.bin"
    small.write_bytes(b"\x00local\xff")
    (tmp_path / "empty").write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    copied = {}
    for argv in (
        ["cp", str(small), "box:/tmp/x.bin"],
        ["cp", str(small), "box:/tmp/"],
        ["cp", str(small), "box:"],
        ["cp", str(tmp_path / "empty"), "box:/tmp/e"],
        ["cp", str(small), "ghost:/tmp/x"],
        ["cp", "box:/etc/hosts", str(out / "hosts.copy")],
        ["cp", "box:/etc/hosts", str(out)],
        ["cp", "ghost:/etc/hosts", str(out / "never")],
        ["cp", str(small), str(out / "local")],
        ["cp", "box:/a", "box:/b"],
    ):
        assert quick.find(argv) is not None, argv
        runs = []
        for way in (quick_run, typer_run):
            said = way(argv, monkeypatch)
            runs.append((*said, sorted((f.name, f.read_bytes()) for f in out.iterdir())))
            for f in out.iterdir():
                f.unlink()
        assert runs[0] == runs[1], argv
        copied[argv[-1]] = runs[0][-1]
    assert copied[str(out / "hosts.copy")] == [("hosts.copy", b"\x00guest\xff\n")]
    assert copied[str(out)] == [("hosts", b"\x00guest\xff\n")]
    assert copied[str(out / "never")] == []
    big = tmp_path / "big"
    big.write_bytes(b"b" * BIG_FILE)  # a bar is drawn for it on a terminal: the typer command's
    for argv in (
        ["cp", str(big), "box:/tmp/"],
        ["cp", str(tmp_path / "absent"), "box:/tmp/"],
        ["cp", str(tmp_path), "box:/tmp/"],
        ["cp", str(small)],
        ["cp", str(small), "box:/x", "more"],
    ):
        assert quick.find(argv) is None, argv


def test_cp_of_a_computers_file_to_a_terminal_is_the_typer_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal the typer command draws a big download's bar: the quick one leaves it."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert quick.find(["cp", "box:/etc/hosts", "out"]) is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert quick.find(["cp", "box:/etc/hosts", "out"]) is not None


def test_cp_draws_a_bar_for_a_big_file_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from sanbox.cli import files
    from sanbox.cli._output import err_console
    from sanbox.cli.grammars import BIG_FILE

    for terminal, size, drawn in (
        (True, BIG_FILE, True),
        (True, BIG_FILE - 1, False),
        (False, BIG_FILE, False),  # rich would draw none, only an empty line at its end
    ):
        monkeypatch.setattr(err_console, "_force_terminal", terminal)
        assert (files._progress(size)._bar is not None) == drawn, (terminal, size)


def test_usage_csv_is_the_servers_text_without_terminal_escapes_off_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, _, seen = quick_run(["usage", "--csv"], monkeypatch)
    assert code == 0 and out == "key,running_hours\nbox,2.0\n"
    assert seen[0][2] == [("format", "csv"), ("group_by", "computer")]


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        (["secret", "set", "openai", "--host", "a.b", "--value-stdin"], "sk-1\n"),
        (["secret", "set", "openai", "--host", "a.b", "--host", "*.c", "--value-stdin"], "v"),
        (["secret", "set", "openai", "--host", "a.b", "--value-stdin", "--json"], "sk-1\r\n"),
        (["secret", "set", "openai", "--value-stdin", "--host", "a.b", "--placeholder"], "v"),
        (["secret", "set", "openai", "--host", "a.b", "--header", "X-Key: {value}"], "v"),
        (["secret", "set", "openai", "--host", "a.b", "--value-stdin"], ""),
        (["secret", "set", "openai", "--host", "a.b", "--value-stdin"], b"\xff"),
        (["secret", "set", "openai", "--host", "a.b", "--value-stdin"], "x" * 9000),
        (["secret", "set", "ghost", "--host", "a.b", "--value-stdin"], "v"),
    ],
)
def test_secret_set_reads_its_value_from_stdin_both_ways(
    argv: list[str], stdin: str | bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value read alike (one newline less; empty, not UTF-8 or too long refused, never
    printed), the same request (its body holds the value), the same output."""
    assert quick.find(argv) is not None
    assert quick_run(argv, monkeypatch, stdin) == typer_run(argv, monkeypatch, stdin)


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        (["config", "set", "--api-key-stdin"], "sbk_piped\n"),
        (["config", "set", "--url", "http://elsewhere.test", "--api-key-stdin"], "sbk_piped"),
        (["config", "set", "--api-key-stdin"], ""),
        (["config", "set", "--api-key-stdin"], "sbk_a\nsbk_b\n"),
        (["config", "set", "--api-key", "sbk_x", "--api-key-stdin"], "sbk_piped"),
    ],
)
def test_config_set_reads_the_key_from_stdin_both_ways(
    argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`--api-key-stdin`: the key kept out of shell history and `ps`, read alike both ways (one
    newline less; empty, two lines, or both ways of giving it refused), saved owner-only."""
    assert quick.find(argv) is not None
    quick_ran = quick_run(argv, monkeypatch, stdin)
    saved = tmp_path / "absent.toml"
    wrote = saved.read_text() if saved.exists() else None
    saved.unlink(missing_ok=True)
    assert quick_ran == typer_run(argv, monkeypatch, stdin)
    assert (saved.read_text() if saved.exists() else None) == wrote
    if quick_ran[0] == 0:
        assert wrote is not None and 'api_key = "sbk_piped"' in wrote
        assert saved.stat().st_mode & 0o777 == 0o600
    else:
        assert wrote is None and "sbk_" not in quick_ran[2]  # never said back


def test_logs_follow_misses_nothing_written_after_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sanbox logs NAME -f` (a typer command) follows from the last event it listed: one
    written between the list and the follow is replayed by the server (`after=ID`), not lost;
    only the computer's own are printed."""
    code, out, err, seen = typer_run(["logs", "box", "-f"], monkeypatch)
    assert (code, err) == (0, "")
    assert [(m, p, q) for m, p, q, *_ in seen][-1] == ("GET", "/v1/events", [("after", "2")])
    assert isinstance(out, str) and out.count("computer.created") == 1 and "bye" in out


@pytest.mark.parametrize("made", [True, False], ids=["key made", "key there"])
def test_ssh_and_ssh_config_are_the_typer_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: bool
) -> None:
    """`sanbox ssh-config NAME` and `sanbox ssh NAME` both ways: the same requests, output, files
    (the user's key made once when there is none; known_hosts; the config block) and the same
    ssh they become."""
    import os
    import shutil

    became: list[list[str]] = []

    def execv(program: str, argv: list[str]) -> None:
        became.append([program, *argv])
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    which = shutil.which  # ssh-keygen is run (the key made); ssh is not
    monkeypatch.setattr(
        shutil, "which", lambda name: "/usr/bin/ssh" if name == "ssh" else which(name)
    )
    keys = tmp_path / "ssh"
    for argv in (["ssh-config", "box"], ["ssh", "box"]):
        files = []
        for run in (quick_run, typer_run):
            shutil.rmtree(keys, ignore_errors=True)
            if not made:
                keys.mkdir(mode=0o700)
                (keys / "id_ed25519").write_text("private\n")
                (keys / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMe x\n")
            code, out, err, seen = run(argv, monkeypatch)
            assert code == 0, err
            public = (keys / "id_ed25519.pub").read_text().strip()
            assert isinstance(seen, list) and seen[1][3] == {"public_key": public}
            seen[1] = (*seen[1][:3], "the user's key", *seen[1][4:])  # a new one each, if made
            written = {p.name: p.read_bytes() for p in keys.iterdir() if "id_" not in p.name}
            files.append(((code, out, err, seen), written))
        assert files[0] == files[1]
        (code, out, err, seen), written = files[0]
        assert [(m, p) for m, p, *_ in seen] == [
            ("GET", "/v1/computers/box"),
            ("POST", "/v1/computers/cmp_1/ssh-keys"),
        ]
        assert written[".lock"] == b"" and b"sanbox-box ssh-ed25519" in written["known_hosts"]
        assert ("made the SSH key" in str(err)) is made
    assert became[0] == became[1] and became[0][1:4] == [
        "ssh",
        "-F",
        str(keys / "sanbox-box.config"),
    ]
