"""The argv of each quick command (sanbox.cli.quick), option by option as its typer command
declares it (spellings, repeats, number ranges, KEY=VALUE), for sanbox.cli.argv to read in its
plain forms; and the values both ways read alike (a duration, a quota's limit), so the typer
command and the quick one take the same."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from .argv import Grammar, is_pair

JSON = {"--json": "json"}
FORCE = {"--force": "force", "-f": "force"}


def is_secret(value: str) -> bool:
    """NAME or NAME=ENV (what `--secret` takes)."""
    name, sep, env = value.partition("=")
    return bool(name) and not (sep and not env)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+)([smhdw]?)")
_HOST_NAME = re.compile(r"[A-Za-z0-9._~-]+")


def parse_duration(text: str) -> int:
    """Seconds in `90`, `90s`, `15m`, `12h`, `30d`, `2w` (or sums: `1d12h`); ValueError else."""
    parts = _DURATION.findall(text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 12h, 30d or 2w")
    seconds = sum(int(n) * _UNITS[u or "s"] for n, u in parts)
    if seconds <= 0:
        raise ValueError("a duration must be longer than 0 seconds")
    return seconds


def parse_limit(text: str | None) -> int | None | str:
    """A quota option: a count, `none` (no limit), or unset (`""`: keep it as it is)."""
    if text is None:
        return ""
    if text.strip().lower() in ("none", "-"):
        return None
    if not text.strip().isdigit():
        raise ValueError(f"{text!r} is not a limit: give a number, or `none` for no limit")
    return int(text)


def _reads(parse: Callable[[str], object]) -> Callable[[str], bool]:
    """A check: `parse` takes the value (one it refuses is the typer command's to report)."""

    def check(value: str) -> bool:
        try:
            parse(value)
        except ValueError:
            return False
        return True

    return check


def is_host_name(value: str) -> bool:
    """A host name both ways put in a fleet path alike: nothing in it that quoting or httpx's
    handling of a path would change."""
    return _HOST_NAME.fullmatch(value) is not None


def shown(*arguments: str) -> Grammar:
    """ARGUMENTS and `--json`."""
    return Grammar(arguments, JSON, frozenset({"json"}))


def removed(argument: str) -> Grammar:
    """One or more ARGUMENTs and `-f/--force`."""
    return Grammar((argument,), FORCE, frozenset({"force"}), rest=True)


BIG_FILE = 1 << 20  # bytes: `cp` draws a transfer bar for a file of this size or more


def remote_file(spec: str) -> tuple[str, str] | None:
    """`NAME:PATH` names a computer's file; anything with a `/` before the `:` is local."""
    head, sep, tail = spec.partition(":")
    if not sep or not head or "/" in head:
        return None
    return head, tail


def copy_ends(src: str, dst: str) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """`cp SRC DST`'s computer side, (NAME, PATH) as the source or as the destination; a line
    and exit 1 unless exactly one side is NAME:PATH."""
    ends = remote_file(src), remote_file(dst)
    if (ends[0] is None) == (ends[1] is None):
        from ._output import fail

        fail("invalid_argument", "exactly one of SRC and DST must be NAME:PATH")
    return ends


def upload_path(local: Path, where: str) -> str:
    """Where `cp LOCAL NAME:WHERE` writes: WHERE, or the local file's name in the folder WHERE
    ends with (/root/ when WHERE is empty)."""
    return f"{where or '/root/'}{local.name}" if not where or where.endswith("/") else where


def into_folder(local: Path, where: str) -> str:
    """Where `cp LOCAL NAME:WHERE` writes when WHERE, written without its trailing slash, is a
    folder there: the local file's name in it, as cp and scp do."""
    return f"{where.rstrip('/')}/{local.name}"


def download_target(dst: str, where: str) -> Path:
    """Where `cp NAME:WHERE DST` writes: DST, or WHERE's name in DST if that is a folder."""
    target = Path(dst)
    return target / Path(where).name if target.is_dir() else target


def is_quick_copy_source(value: str) -> bool:
    """`cp`'s source as the quick command copies it: a computer's file when stderr is no terminal
    (the typer command's transfer bar is drawn on one only), or a regular local file under
    BIG_FILE (sent in one piece; no bar is drawn for it)."""
    if remote_file(value) is not None:
        return not sys.stderr.isatty()
    try:
        found = os.stat(value)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(found.st_mode) and found.st_size < BIG_FILE


NOTHING = Grammar()
ONE = Grammar(("name",))
COPY = Grammar(("src", "dst"), checks={"src": is_quick_copy_source})
LISTED = Grammar(options=JSON, flags=frozenset({"json"}))
LS = Grammar(
    options={"--state": "state", "--label": "label", "-l": "label", **JSON},
    flags=frozenset({"json"}),
    many=frozenset({"label"}),
    checks={"label": is_pair},
)
CREATE = Grammar(
    options={
        "--template": "template",
        "-t": "template",
        "--name": "name",
        "-n": "name",
        "--cpus": "cpus",
        "--idle-timeout": "idle_timeout",
        "--memory": "memory",
        "--disk": "disk",
        "--env": "env",
        "-e": "env",
        "--label": "label",
        "-l": "label",
        "--from-snapshot": "from_snapshot",
        "--secret": "secret",
        "--lifetime": "lifetime",
        "--on-lifetime": "on_lifetime",
        "--max-running": "max_running",
        "--region": "region",
        **JSON,
    },
    flags=frozenset({"json"}),
    many=frozenset({"env", "label", "secret"}),
    numbers={
        "cpus": (None, None),
        "memory": (None, None),
        "disk": (None, None),
        "idle_timeout": (0, None),
        "lifetime": (0, None),
        "max_running": (0, None),
    },
    checks={"env": is_pair, "label": is_pair, "secret": is_secret},
)
LOGS = Grammar(
    ("name",),
    {"--console": "console", "--lines": "lines", "-n": "lines"},
    frozenset({"console"}),
    numbers={"lines": (None, None)},
)
SNAPSHOT_CREATE = Grammar(
    ("computer",),
    {"--memory": "memory", "--name": "name", "-n": "name", **JSON},
    frozenset({"memory", "json"}),
)
FORK = Grammar(
    ("computer",),
    {
        "--count": "count",
        "-c": "count",
        "--name": "name",
        "-n": "name",
        "--region": "region",
        **JSON,
    },
    frozenset({"json"}),
    numbers={"count": (1, 16)},
)
CONSOLE = Grammar(options={"--open": "open"}, flags=frozenset({"open"}))
KEY_LS = Grammar(options={"--org": "org", **JSON}, flags=frozenset({"json"}))
# `--csv` is not here: the typer command prints the server's CSV
USAGE = Grammar(
    options={"--from": "from", "--to": "to", "--by": "by", "--org": "org", "--csv": "csv", **JSON},
    flags=frozenset({"json", "csv"}),
)

TEMPLATE_GET = Grammar(("template",), {"--region": "region", **JSON}, frozenset({"json"}))
UPDATE = Grammar(
    ("name",),
    {
        "--idle-timeout": "idle_timeout",
        "--lifetime": "lifetime",
        "--on-lifetime": "on_lifetime",
        "--max-running": "max_running",
    },
    numbers={"idle_timeout": (0, None), "lifetime": (0, None), "max_running": (0, None)},
    needed=frozenset({"idle_timeout", "lifetime", "on_lifetime", "max_running"}),
)
MOVE = Grammar(("name",), {"--to": "host"})
SNAPSHOT_MOVE = Grammar(("snapshot",), {"--to": "host"})
CONFIG_SET = Grammar(
    options={"--url": "url", "--api-key": "api_key", "--api-key-stdin": "api_key_stdin"},
    flags=frozenset({"api_key_stdin"}),
    needed=frozenset({"url", "api_key", "api_key_stdin"}),
)

# -- network and ports ----------------------------------------------------------------------------

PORT = {"port": (1, 65535)}
RULES = Grammar(("name", "rules"), rest=True)
PUBLISH = Grammar(("name", "port"), {"--public": "public"}, frozenset({"public"}), numbers=PORT)
UNPUBLISH = Grammar(("name", "port"), numbers=PORT)
VIEW_LINK = Grammar(
    ("name", "port"), {"--expires-in": "expires_in"}, numbers={**PORT, "expires_in": (None, None)}
)

# -- the org's things -----------------------------------------------------------------------------

TEMPLATE_RM = Grammar(
    ("templates",), {**FORCE, "--region": "region"}, frozenset({"force"}), rest=True
)
POOL_SET = Grammar(
    ("template",),
    {"--size": "size", "-s": "size", **JSON},
    frozenset({"json"}),
    numbers={"size": (0, None)},
    needed=frozenset({"size"}),
)
SECRET_BIND = Grammar(
    ("name", "computer"), {"--env": "env", "-e": "env", **JSON}, frozenset({"json"})
)
SECRET_UNBIND = Grammar(("name", "computer"))
SECRET_SET = Grammar(
    ("name",),
    {
        "--host": "host",
        "--value-stdin": "value_stdin",
        "--header": "header",
        "--placeholder": "placeholder",
        **JSON,
    },
    frozenset({"value_stdin", "placeholder", "json"}),
    many=frozenset({"host"}),
    needed=frozenset({"host"}),  # required by the typer command, which says so
)
KEY_CREATE = Grammar(
    options={
        "--org": "org",
        "--name": "name",
        "--admin": "admin",
        "--host-admin": "host_admin",
        "--expires-in": "expires_in",
        "--expires-at": "expires_at",
        **JSON,
    },
    flags=frozenset({"admin", "host_admin", "json"}),
    checks={"expires_in": _reads(parse_duration)},
)
KEY_REVOKE = Grammar(("key_id",))
ORG_QUOTA = Grammar(
    ("org",),
    {
        "--running": "running",
        "--vcpus": "vcpus",
        "--memory": "memory_mib",
        "--disk": "disk_gib",
        "--snapshots": "snapshots",
        **JSON,
    },
    frozenset({"json"}),
    checks={
        dest: _reads(parse_limit)
        for dest in ("running", "vcpus", "memory_mib", "disk_gib", "snapshots")
    },
)
ORG_REGIONS = Grammar(("org",), {"--home": "home", "--allow": "allow"}, many=frozenset({"allow"}))
AUDIT = Grammar(
    options={"--limit": "limit", "-n": "limit", "--after": "after", "--org": "org", **JSON},
    flags=frozenset({"json"}),
    numbers={"limit": (1, 1000), "after": (None, None)},
)

# -- the fleet's hosts ----------------------------------------------------------------------------

HOST = Grammar(("name",), checks={"name": is_host_name})
HOST_DRAIN = Grammar(("name",), {"--undo": "undo"}, frozenset({"undo"}), checks=HOST.checks)
HOST_FORGET = Grammar(
    ("name",),
    {"--confirm-dead": "confirm_dead"},
    frozenset({"confirm_dead"}),
    checks=HOST.checks,
    needed=frozenset({"confirm_dead"}),
)
HOST_TOKEN = Grammar(
    options={"--region": "region", "--ttl": "ttl", "--host": "host"},
    checks={"ttl": _reads(parse_duration)},
    needed=frozenset({"region"}),
)
