"""The argv of each quick command (sanbox.cli.quick), option by option as its typer command
declares it (spellings, repeats, number ranges, KEY=VALUE), for sanbox.cli.argv to read in its
plain forms."""

from __future__ import annotations

from .argv import Grammar, is_pair

JSON = {"--json": "json"}
FORCE = {"--force": "force", "-f": "force"}


def is_secret(value: str) -> bool:
    """NAME or NAME=ENV (what `--secret` takes)."""
    name, sep, env = value.partition("=")
    return bool(name) and not (sep and not env)


def shown(*arguments: str) -> Grammar:
    """ARGUMENTS and `--json`."""
    return Grammar(arguments, JSON, frozenset({"json"}))


def removed(argument: str) -> Grammar:
    """One or more ARGUMENTs and `-f/--force`."""
    return Grammar((argument,), FORCE, frozenset({"force"}), rest=True)


NOTHING = Grammar()
ONE = Grammar(("name",))
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
    options={"--from": "from", "--to": "to", "--by": "by", "--org": "org", **JSON},
    flags=frozenset({"json"}),
)
