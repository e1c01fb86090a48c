"""What the service supervisor (``services.py``) runs, and its rules, as pure functions:
``/etc/sanbox/services.json`` checked entry by entry, the restart policy, the backoff between
restarts and when a service's log is rotated.

The file is written by the template build, but anyone with root in the guest can rewrite it, so
every entry is checked here: a bad one is skipped with the reason, the others still run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
RESTART = ("always", "on-failure", "never")
MAX_SERVICES = 16
MAX_COMMAND = 4096
MAX_CWD = 4096
MAX_ENV = 256
MAX_ENV_VALUE = 128 * 1024
MAX_FILE = 4 * 1024 * 1024  # a bigger services.json is refused whole
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
BACKOFF_FIRST = 0.5  # seconds before the first restart, doubling ...
BACKOFF_MAX = 30.0  # ... up to this
BACKOFF_RESET = 60.0  # a run that lasted this long starts the doubling over
LOG_LIMIT = 1024 * 1024  # a service's log is rotated to NAME.log.1 before it passes this


class ConfigError(Exception):
    """The file as a whole cannot be used (not JSON, not an object, too big)."""


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    command: str
    cwd: str = "/root"
    restart: str = "always"


@dataclass(frozen=True)
class ServicesConfig:
    env: dict[str, str] = field(default_factory=dict)
    services: tuple[ServiceSpec, ...] = ()

    def process_env(self) -> dict[str, str]:
        """A service's whole environment: the clean base, then the file's ``env``."""
        return {**BASE_ENV, **self.env}


def _env(raw: object, problems: list[str]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append("env: not an object, ignored")
        return {}
    env: dict[str, str] = {}
    for key, value in raw.items():
        if len(env) >= MAX_ENV:
            problems.append(f"env: more than {MAX_ENV} variables, the rest ignored")
            break
        if ENV_NAME.fullmatch(key) is None:
            problems.append(f"env: invalid name {key[:80]!r}, skipped")
        elif not isinstance(value, str) or "\0" in value or len(value) > MAX_ENV_VALUE:
            problems.append(f"env: {key}: not a string without NUL of at most 128 KiB, skipped")
        else:
            env[key] = value
    return env


def service_problem(raw: object) -> str | None:
    """Why ``raw`` is not one usable service entry (``None`` if it is)."""
    if not isinstance(raw, dict):
        return "not an object"
    name, command = raw.get("name"), raw.get("command")
    cwd, restart = raw.get("cwd", "/root"), raw.get("restart", "always")
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        return f"invalid name {str(name)[:80]!r}: use a-z, 0-9 and '-', at most 63"
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        return f"{name}: command must be a non-empty string without NUL"
    if len(command) > MAX_COMMAND:
        return f"{name}: command longer than {MAX_COMMAND} characters"
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd or len(cwd) > MAX_CWD:
        return f"{name}: cwd must be an absolute path"
    if restart not in RESTART:
        return f"{name}: restart must be one of {', '.join(RESTART)}"
    return None


def parse_config(data: object) -> tuple[ServicesConfig, list[str]]:
    """The usable part of the decoded file, and why each skipped part was skipped."""
    if not isinstance(data, dict):
        raise ConfigError("the file is not a JSON object")
    problems: list[str] = []
    env = _env(data.get("env"), problems)
    raw_services = data.get("services", [])
    if not isinstance(raw_services, list):
        problems.append("services: not a list, ignored")
        raw_services = []
    services: list[ServiceSpec] = []
    for i, raw in enumerate(raw_services):
        problem = service_problem(raw)
        if problem is None and len(services) >= MAX_SERVICES:
            problem = f"more than {MAX_SERVICES} services"
        if problem is None and raw["name"] in {s.name for s in services}:
            problem = f"{raw['name']}: a second service of that name"
        if problem is not None:
            problems.append(f"services[{i}]: {problem}, skipped")
            continue
        services.append(
            ServiceSpec(
                raw["name"], raw["command"], raw.get("cwd", "/root"), raw.get("restart", "always")
            )
        )
    return ServicesConfig(env, tuple(services)), problems


def load_config(text: bytes) -> tuple[ServicesConfig, list[str]]:
    """``parse_config`` of the file's bytes; ``ConfigError`` if they are not one JSON object."""
    if len(text) > MAX_FILE:
        raise ConfigError(f"the file is larger than {MAX_FILE} bytes")
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"not JSON: {exc}") from None
    return parse_config(data)


# -- running --------------------------------------------------------------------------------------


def restart_wanted(policy: str, returncode: int) -> bool:
    """Whether a service that ended with ``returncode`` (negative: killed by that signal) runs
    again: ``always`` on any end, ``on-failure`` on a non-zero code or a signal, ``never`` not."""
    if policy == "always":
        return True
    if policy == "on-failure":
        return returncode != 0
    return False


def exit_record(returncode: int) -> dict[str, int | None]:
    if returncode < 0:
        return {"code": None, "signal": -returncode}
    return {"code": returncode, "signal": None}


def describe_exit(returncode: int) -> str:
    return f"signal {-returncode}" if returncode < 0 else f"code {returncode}"


class Backoff:
    """Seconds to wait before each restart: 0.5 doubling to 30, back to 0.5 after a run that lasted
    at least a minute (a service that crashes at once does not spin, one that ran well restarts
    quickly)."""

    def __init__(self) -> None:
        self.streak = 0

    def next_delay(self, ran_for: float) -> float:
        if ran_for >= BACKOFF_RESET:
            self.streak = 0
        delay = min(BACKOFF_FIRST * (1 << self.streak), BACKOFF_MAX)
        if delay < BACKOFF_MAX:
            self.streak += 1
        return delay


def should_rotate(size: int, incoming: int, limit: int = LOG_LIMIT) -> bool:
    """Whether a log of ``size`` bytes is rotated before ``incoming`` more bytes are written: when
    they would take it past ``limit``. An empty log takes any write (chunks are far below it)."""
    return size > 0 and size + incoming > limit
