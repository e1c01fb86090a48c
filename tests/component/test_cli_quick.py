"""Every way `sanbox` runs a command says and does exactly what the whole typer app does, against
the real app: the common commands without typer (sanbox.cli.quick), the others in a typer app of
their own module (sanbox.cli.registry), compared with SANBOX_CLI_EAGER=1 (the whole app, as it
always ran).

The attack: a quicker path that prints a table, JSON or an error otherwise, exits with another
status, or sends another request than the typer command breaks every script that reads it. Each
argv runs both ways and the exit status, stdout and stderr must be equal; a command that changes
something runs both ways on twin computers, its output equal but for their names and ids.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sanbox import Sanbox

from .conftest import LiveServer

pytestmark = pytest.mark.component

ENTRY = "import sys; sys.argv[0] = 'sanbox'; from sanbox.cli.main import run; run()"
IDS = re.compile(
    r"\b(cmp|snp|key|org)_[a-z0-9]+\b|\b(sbk|sbj)_[\w-]+|sanbox_view_token=\S+"
    r"|\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)?"
)


def start(
    url: str, key: str, tmp: Path, *args: str, eager: bool, stdin: str | None = None
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "SANBOX_URL": url,
        "SANBOX_API_KEY": key,
        "SANBOX_CONFIG": str(tmp / "absent.toml"),
        "SANBOX_CLI_EAGER": "1" if eager else "",
    }
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
    )


def ended(proc: subprocess.Popen[str], stdin: str | None = None) -> tuple[int, str, str]:
    out, err = proc.communicate(stdin, timeout=120)
    return proc.returncode, out, err


def sanbox(url: str, key: str, tmp: Path, *args: str, eager: bool) -> tuple[int, str, str]:
    return ended(start(url, key, tmp, *args, eager=eager))


def both_ways(
    url: str, key: str, tmp: Path, *args: str, at_once: bool = False
) -> tuple[int, str, str]:
    """`args` run the quick way, then through the whole app: the same exit, stdout and stderr.
    `at_once` (for what changes nothing): both at the same time."""
    if at_once:
        now, then = (
            ended(proc) for proc in [start(url, key, tmp, *args, eager=e) for e in (False, True)]
        )
    else:
        now = sanbox(url, key, tmp, *args, eager=False)
        then = sanbox(url, key, tmp, *args, eager=True)
    assert now == then, args
    return now


def twins(
    server: LiveServer, tmp: Path, *args: str, stdin: str | None = None
) -> tuple[int, str, str]:
    """`args` with NAME as `quick` run now, and as `eager` through the whole app: equal output,
    each name written NAME, each id and time ID."""
    runs: list[tuple[int, str, str]] = []
    ways = (("quick", False), ("eager", True))  # on twin computers: both at the same time
    procs = [
        start(
            server.url,
            server.key,
            tmp,
            *(a.replace("NAME", name) for a in args),
            eager=eager,
            stdin=stdin,
        )
        for name, eager in ways
    ]
    for (name, _), proc in zip(ways, procs, strict=True):
        code, out, err = ended(proc, stdin)
        out, err = (IDS.sub("ID", text).replace(name, "NAME") for text in (out, err))
        runs.append((code, out, err))
    assert runs[0] == runs[1], args
    return runs[0]


def test_the_commands_say_what_the_whole_app_says(live_server: LiveServer, short_tmp: Path) -> None:
    url, key, tmp = live_server.url, live_server.key, short_tmp
    with Sanbox(url, key) as client:
        client.computers.create(name="seen", labels={"role": "web"})
        client.secrets.set("tok", "value-0123", ["api.example.com"])
        revoked = client.keys.create(name="revoked").id
        for args in (
            ["ls"],
            ["ls", "--json"],
            ["ls", "-l", "role=web", "--state", "running"],
            ["get", "seen"],
            ["get", "seen", "--json"],
            ["logs", "seen"],
            ["net", "show", "seen"],
            ["port", "ls", "seen", "--json"],
            ["snapshot", "ls"],
            ["template", "ls"],
            ["template", "get", "base", "--json"],
            ["pool", "ls"],
            ["secret", "ls"],
            ["org", "ls"],
            ["image", "ls"],
            ["config", "show"],
            ["key", "ls"],
            ["key", "ls", "--json"],
            ["usage", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"],
            ["usage", "--by", "template", "--from", "2026-01-01", "--to", "2026-01-02", "--csv"],
            ["audit", "-n", "3"],
        ):
            assert both_ways(url, key, tmp, *args, at_once=True)[0] == 0, args
        for args in (  # what changes something, the same again (the second run finds it done)
            ["net", "allow", "seen", "example.com", "*.pypi.org"],
            ["net", "deny", "seen", "*.pypi.org"],
            ["port", "publish", "seen", "8080"],
            ["pool", "set", "base", "-s", "0"],
            ["pool", "set", "base", "--size", "0", "--json"],
            ["secret", "bind", "tok", "seen", "-e", "TOK"],
            ["secret", "bindings", "seen"],
            ["secret", "bindings", "seen", "--json"],
            ["secret", "rm", "-f", "nope"],
            ["key", "revoke", revoked],
            ["org", "quota", "default"],
            ["org", "quota", "default", "--json"],
            ["org", "regions", "default"],
            ["template", "get", "base", "--region", "eu"],
            ["template", "rm", "-f", "ghost"],
            ["template", "prune"],
            ["image", "prune"],
            ["update", "seen", "--idle-timeout", "300"],
            ["host", "ls"],
            ["host", "jobs"],
        ):
            assert both_ways(url, key, tmp, *args)[0] == 0, args
        # cp: files in and out again (a big one out: no bar is drawn off a terminal either way)
        small, big = tmp / "small.bin", tmp / "big.bin"
        small.write_bytes(bytes(range(256)) * 3)
        big.write_bytes(os.urandom(3 << 20))
        for args in (
            ["cp", str(small), f"seen:{tmp}/guest/small.bin"],
            ["cp", str(big), f"seen:{tmp}/guest/"],
            ["cp", f"seen:{tmp}/guest/small.bin", str(tmp / "small.back")],
            ["cp", f"seen:{tmp}/guest/big.bin", str(tmp / "big.back")],
        ):
            assert both_ways(url, key, tmp, *args)[0] == 0, args
        assert (tmp / "small.back").read_bytes() == small.read_bytes()
        assert (tmp / "big.back").read_bytes() == big.read_bytes()
        missing = both_ways(url, key, tmp, "cp", "seen:/nonexistent/x", str(tmp / "no"))
        assert missing[0] == 1 and not (tmp / "no").exists()
        # a view link's token and end are the server's of that second: alike once masked
        link = [
            sanbox(url, key, tmp, "port", "view-link", "seen", "8080", eager=e)
            for e in (False, True)
        ]
        masked = [tuple(IDS.sub("ID", str(part)) for part in run) for run in link]
        assert masked[0] == masked[1] and masked[0][0] == "0", link
        # the report's time of reading (as_of) is the server's now: each run its own
        day = ["usage", "--by", "day", "--from", "2026-01-01", "--to", "2026-01-03", "--json"]
        report = [IDS.sub("ID", sanbox(url, key, tmp, *day, eager=e)[1]) for e in (False, True)]
        assert report[0] == report[1] and '"group_by": "day"' in report[0]
        for args in (
            ["get", "ghost"],
            ["stop", "ghost"],
            ["rm", "ghost"],
            ["snapshot", "get", "nope"],
            ["fork", "ghost"],
            ["create", "--from-snapshot", "nope"],
            ["net", "show", "ghost"],
            ["net", "allow", "ghost", "example.com"],
            ["port", "unpublish", "seen", "9"],
            ["pool", "set", "ghost", "-s", "1"],
            ["secret", "unbind", "nope", "seen"],
            ["secret", "rm", "nope"],
            ["key", "revoke", "key_nope"],
            ["template", "rm", "ghost"],
            ["snapshot", "move", "nope"],
            ["host", "get", "ghost"],
            ["host", "drain", "ghost"],
            ["host", "forget", "ghost", "--confirm-dead"],
        ):
            code, _, err = both_ways(url, key, tmp, *args, at_once=True)
            assert code == 1 and re.fullmatch(r"error \(\w+_not_found\) .*\n", err), (args, err)
        for args in (
            ["ls", "--bogus"],
            ["get"],
            ["ls", "-l", "nonsense"],
            ["fork", "seen", "-c", "0"],
            ["get", ".."],
            ["move", "seen"],
            ["port", "publish", "seen", "0"],
            ["pool", "set", "base"],
            ["update", "seen"],
            ["key", "create", "--expires-in", "soon"],
            ["host", "forget", "ghost"],
        ):
            assert both_ways(url, key, tmp, *args, at_once=True)[0] != 0, args
        for args in ([], ["--help"], ["ls", "--help"], ["snapshot", "--help"], ["snapshot"]):
            both_ways(url, key, tmp, *args, at_once=True)
        wrong = both_ways(url, "sbk_wrong", tmp, "ls", at_once=True)
        assert wrong[0] == 1 and "error (unauthorized)" in wrong[2]
        for computer in client.computers.list():
            computer.delete()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        for args in (["ls"], ["stop", "seen"], ["config", "show"]):
            both_ways(nobody, key, tmp, *args, at_once=True)
        down = both_ways(nobody, key, tmp, "ls", at_once=True)
        assert down[0] == 1 and "error (connection_failed)" in down[2]


def test_what_changes_things_says_it_alike(live_server: LiveServer, short_tmp: Path) -> None:
    server, tmp = live_server, short_tmp
    assert twins(server, tmp, "create", "--name", "NAME", "-l", "k=v", "-e", "A=1")[0] == 0
    for verb in ("restart", "pause", "resume", "stop", "start", "stop"):
        twins(server, tmp, verb, "NAME")  # a local process cannot pause: refused alike
    assert twins(server, tmp, "snapshot", "create", "NAME", "-n", "NAME-snap")[0] == 0
    assert twins(server, tmp, "snapshot", "get", "NAME-snap", "--json")[0] == 0
    assert twins(server, tmp, "fork", "NAME", "-n", "NAME-fork", "--json")[0] == 0
    assert twins(server, tmp, "snapshot", "rm", "NAME-snap")[0] == 0
    assert (
        twins(server, tmp, "update", "NAME", "--lifetime", "3600", "--on-lifetime", "delete")[0]
        == 0
    )
    assert twins(server, tmp, "port", "publish", "NAME", "8080", "--public")[0] == 0
    assert twins(server, tmp, "port", "unpublish", "NAME", "8080")[0] == 0
    assert (
        twins(server, tmp, "key", "create", "--name", "NAME", "--expires-at", "2030-01-31T12:00Z")[
            0
        ]
        == 0
    )
    assert twins(server, tmp, "key", "create", "--name", "NAME", "--admin", "--json")[0] == 0
    assert twins(server, tmp, "org", "create", "NAME-org")[0] == 0
    for stdin in ("sk-one-0123\n", "sk-two-0123\n"):  # made, then rotated (version 2)
        said = twins(
            server,
            tmp,
            "secret",
            "set",
            "NAME-key",
            "--host",
            "a.test",
            "--value-stdin",
            stdin=stdin,
        )
        assert said[0] == 0 and "sk-" not in said[1] + said[2], said
    assert twins(server, tmp, "secret", "set", "NAME-key", "--host", "a.test", stdin="")[0] == 1
    assert twins(server, tmp, "host", "token", "--region", "eu", "--ttl", "15m")[0] == 0
    assert twins(server, tmp, "rm", "NAME", "NAME-fork", "NAME")[0] == 1  # gone by then
    assert twins(server, tmp, "rm", "-f", "NAME")[0] == 0
