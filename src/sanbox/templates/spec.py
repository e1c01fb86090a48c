"""The template spec: one TOML file (`sanbox.toml`) that says what a template's computers are.

    base = "base"                      # or another template: templates layer
    [resources]                        # defaults for its computers
    vcpus = 1, memory_mib = 1024, disk_gib = 8
    [build]
    allow = ["deb.debian.org"]         # where the build itself may reach
    [[steps]]                          # in order; each is one cached layer
    apt = ["jq"]                       # or pip = [...] (venv = "/opt/x": into that venv),
                                       # npm = [...],
                                       # copy = "file", to = "/path", mode = "0644",
                                       # run = "shell command"
    env = { KEY = "value" }            # for every process the agent starts
    [[services]]                       # started at boot by the agent, logs kept
    name = "web", command = "...", cwd = "/srv", restart = "always"
    ports = [8080]                     # published (private) on every computer
    allow = ["api.github.com"]         # the egress allowlist its computers get
    [secrets]                          # bound to its computers: NAME = "ENV_VAR" (or "")
    openai = "OPENAI_API_KEY"
    idle_timeout = 600
    [ready]                            # when a computer of it is ready
    port = 8080  (or command = "...")  timeout = 60

Pure: `parse(text, where)` returns a `Spec` or raises `SpecError` with the line and the reason.
The checks here are the spec's own; the server checks names against what exists (bases,
allowlist rules against the operator's ranges)."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..control.names import check_env, check_name, check_port, is_env_name  # stdlib-only modules
from .package_names import PackageNameError, check_all

MAX_STEPS = 64
MAX_SERVICES = 16
STEP_KINDS = ("apt", "pip", "npm", "copy", "run")
STEP_OPTIONS = {"copy": ("to", "mode"), "pip": ("venv",)}  # keys a step of that kind may have
RESTART = ("always", "on-failure", "never")
MAX_PACKAGES = 1000  # entries of one package step


class SpecError(ValueError):
    """A spec that cannot be used: `line` (1-based, 0 if unknown) and the reason."""

    def __init__(self, where: str, line: int, reason: str) -> None:
        super().__init__(f"{where}:{line}: {reason}" if line else f"{where}: {reason}")
        self.where, self.line, self.reason = where, line, reason


@dataclass(frozen=True)
class Step:
    kind: str  # apt | pip | npm | copy | run
    packages: tuple[str, ...] = ()  # apt, pip, npm
    src: str = ""  # copy: relative to the spec's folder
    dest: str = ""  # copy: absolute path in the guest
    mode: int = 0o644  # copy
    command: str = ""  # run
    venv: str = ""  # pip: the virtual environment to install into ("": the system python)

    def describe(self) -> str:
        if self.kind in ("apt", "pip", "npm"):
            into = f" into {self.venv}" if self.venv else ""
            return f"{self.kind} install {' '.join(self.packages)}{into}"
        if self.kind == "copy":
            return f"copy {self.src} to {self.dest}"
        return f"run {self.command.splitlines()[0][:60] if self.command else ''}"


@dataclass(frozen=True)
class Service:
    name: str
    command: str
    cwd: str = "/root"
    restart: str = "always"


@dataclass(frozen=True)
class Ready:
    port: int | None = None
    command: str | None = None
    timeout: float = 60.0


@dataclass(frozen=True)
class Spec:
    base: str = "base"
    name: str | None = None
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int | None = None
    build_allow: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    services: tuple[Service, ...] = ()
    ports: tuple[int, ...] = ()
    allow: tuple[str, ...] = ()
    secrets: dict[str, str] = field(default_factory=dict)  # secret name -> env var ("": none)
    idle_timeout: int = 1800
    ready: Ready | None = None

    def settings_digest(self) -> str:
        """What is not built into the disk but belongs to the template (defaults, policy)."""
        data = asdict(self)
        data.pop("steps")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# where a key was written, for errors ----------------------------------------------------------


def _line_of(text: str, path: tuple[str | int, ...]) -> int:
    """The line where the value at `path` was written, best effort: each name in the path is the
    next `name =` or `[name]` after the last one found, each index the n-th `[[array]]` header.
    0 if nothing is found."""
    lines = text.splitlines()
    start = found = 0
    table = ""
    for part in path:
        if isinstance(part, int):
            header = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]")
            hits = [n for n, line in enumerate(lines) if header.match(line)]
            if part < len(hits):
                start = found = hits[part] + 1
            continue
        dotted = f"{table}.{part}".strip(".")
        key = re.compile(rf"^\s*\"?{re.escape(part)}\"?\s*=")
        header = re.compile(rf"^\s*\[\s*{re.escape(dotted)}\s*\]")
        for n in range(start, len(lines)):
            if key.match(lines[n]) or header.match(lines[n]):
                start = found = n + 1
                break
        table = dotted
    return found


class _Reader:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where

    def fail(self, path: tuple[str | int, ...], reason: str) -> SpecError:
        return SpecError(self.where, _line_of(self.text, path), reason)

    def table(self, value: Any, path: tuple[str | int, ...], allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"{'.'.join(map(str, path))} must be a table")
        for key in value:
            if key not in allowed:
                raise self.fail((*path, key), f"unknown key {key!r}; allowed: {sorted(allowed)}")
        return value

    def string(self, value: Any, path: tuple[str | int, ...], limit: int = 4096) -> str:
        if not isinstance(value, str) or not value or len(value) > limit or "\x00" in value:
            raise self.fail(path, f"{path[-1]} must be a non-empty string of at most {limit}")
        return value

    def integer(self, value: Any, path: tuple[str | int, ...], low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(path, f"{path[-1]} must be a whole number from {low} to {high}")
        return value

    def strings(
        self, value: Any, path: tuple[str | int, ...], pattern: re.Pattern[str] | None = None
    ) -> tuple[str, ...]:
        if not isinstance(value, list) or len(value) > 1000:
            raise self.fail(path, f"{path[-1]} must be a list of strings")
        out = []
        for item in value:
            if not isinstance(item, str) or (pattern is not None and not pattern.match(item)):
                raise self.fail(path, f"{item!r} in {path[-1]} is not a valid entry")
            out.append(item)
        return tuple(out)

    def guest_path(self, value: Any, path: tuple[str | int, ...]) -> str:
        text = self.string(value, path)
        if not text.startswith("/") or ".." in PurePosixPath(text).parts:
            raise self.fail(path, f"{path[-1]} must be an absolute guest path without '..'")
        return text

    def named(self, check: Any, value: Any, path: tuple[str | int, ...], *args: Any) -> Any:
        try:
            check(value, *args)
        except Exception as exc:  # the names module's own error says what is wrong
            raise self.fail(path, str(exc)) from None
        return value


TOP = {
    "base",
    "name",
    "resources",
    "build",
    "steps",
    "env",
    "services",
    "ports",
    "allow",
    "idle_timeout",
    "ready",
    "secrets",
}


def _step(r: _Reader, raw: Any, i: int) -> Step:
    path: tuple[str | int, ...] = ("steps", i)
    if not isinstance(raw, dict):
        raise r.fail(path, "each [[steps]] entry must be a table")
    kinds = [k for k in STEP_KINDS if k in raw]
    if len(kinds) != 1:
        raise r.fail(path, f"a step does exactly one of {', '.join(STEP_KINDS)}")
    kind = kinds[0]
    r.table(raw, path, {kind, *STEP_OPTIONS.get(kind, ())})
    if kind in ("apt", "pip", "npm"):
        entries = raw[kind]
        if isinstance(entries, list) and len(entries) > MAX_PACKAGES:
            raise r.fail((*path, kind), f"{kind} lists at most {MAX_PACKAGES} packages")
        try:
            packages = check_all(kind, entries)
        except PackageNameError as exc:
            raise r.fail((*path, kind), f"not a valid entry in {kind}: {exc}") from None
        if not packages:
            raise r.fail((*path, kind), f"{kind} lists no package")
        venv = r.guest_path(raw["venv"], (*path, "venv")) if "venv" in raw else ""
        return Step(kind, packages=packages, venv=venv)
    if kind == "run":
        return Step("run", command=r.string(raw["run"], (*path, "run"), 64 * 1024))
    src = r.string(raw["copy"], (*path, "copy"))
    if src.startswith("/") or ".." in PurePosixPath(src).parts:
        raise r.fail((*path, "copy"), "copy names a file in the spec's folder (relative, no '..')")
    if "to" not in raw:
        raise r.fail((*path, "copy"), "copy needs `to`, the absolute path in the guest")
    mode = raw.get("mode", "0644")
    if not isinstance(mode, str) or not re.fullmatch(r"0?[0-7]{3,4}", mode):
        raise r.fail((*path, "mode"), 'mode is an octal string like "0644"')
    return Step("copy", src=src, dest=r.guest_path(raw["to"], (*path, "to")), mode=int(mode, 8))


def _service(r: _Reader, raw: Any, i: int) -> Service:
    path: tuple[str | int, ...] = ("services", i)
    t = r.table(raw, path, {"name", "command", "cwd", "restart"})
    for key in ("name", "command"):
        if key not in t:
            raise r.fail(path, f"a service needs `{key}`")
    restart = t.get("restart", "always")
    if restart not in RESTART:
        raise r.fail((*path, "restart"), f"restart is one of {', '.join(RESTART)}")
    return Service(
        name=r.named(check_name, t["name"], (*path, "name"), "service"),
        command=r.string(t["command"], (*path, "command")),
        cwd=r.guest_path(t.get("cwd", "/root"), (*path, "cwd")),
        restart=restart,
    )


def _ready(r: _Reader, raw: Any) -> Ready:
    t = r.table(raw, ("ready",), {"port", "command", "timeout"})
    if ("port" in t) == ("command" in t):
        raise r.fail(("ready",), "ready has either `port` or `command`")
    port = r.integer(t["port"], ("ready", "port"), 1, 65535) if "port" in t else None
    command = r.string(t["command"], ("ready", "command")) if "command" in t else None
    timeout = float(r.integer(t.get("timeout", 60), ("ready", "timeout"), 1, 3600))
    return Ready(port=port, command=command, timeout=timeout)


def parse(text: str, where: str = "sanbox.toml") -> Spec:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = int(m.group(1)) if (m := re.search(r"line (\d+)", str(exc))) else 0
        raise SpecError(where, line, f"not valid TOML: {exc}") from None
    r = _Reader(text, where)
    r.table(raw, (), TOP)
    res = r.table(raw.get("resources", {}), ("resources",), {"vcpus", "memory_mib", "disk_gib"})
    build = r.table(raw.get("build", {}), ("build",), {"allow"})
    steps = raw.get("steps", [])
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise r.fail(("steps",), f"steps is a list of at most {MAX_STEPS} [[steps]] tables")
    services = raw.get("services", [])
    if not isinstance(services, list) or len(services) > MAX_SERVICES:
        raise r.fail(("services",), f"at most {MAX_SERVICES} [[services]]")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise r.fail(("env",), "env is a table of strings")
    r.named(check_env, env, ("env",))
    ports = raw.get("ports", [])
    if not isinstance(ports, list):
        raise r.fail(("ports",), "ports is a list of port numbers")
    for port in ports:
        r.named(check_port, port, ("ports",))
    bound = raw.get("secrets", {})
    if not isinstance(bound, dict) or not all(isinstance(v, str) for v in bound.values()):
        raise r.fail(("secrets",), 'secrets is a table of NAME = "ENV_VAR" (or "")')
    for name, var in bound.items():
        r.named(check_name, name, ("secrets",), "secret name")
        if var and not is_env_name(var):
            raise r.fail(("secrets", name), f"{var!r} is not an environment variable name")
    parsed_services = tuple(_service(r, s, i) for i, s in enumerate(services))
    names = [s.name for s in parsed_services]
    if len(set(names)) != len(names):
        raise r.fail(("services",), "two services have the same name")
    return Spec(
        base=r.named(check_name, raw.get("base", "base"), ("base",), "base template"),
        name=r.named(check_name, raw["name"], ("name",), "template") if "name" in raw else None,
        vcpus=r.integer(res.get("vcpus", 1), ("resources", "vcpus"), 1, 256),
        memory_mib=r.integer(res.get("memory_mib", 512), ("resources", "memory_mib"), 128, 1 << 20),
        disk_gib=(
            r.integer(res["disk_gib"], ("resources", "disk_gib"), 1, 16 * 1024)
            if "disk_gib" in res
            else None
        ),
        build_allow=r.strings(build.get("allow", []), ("build", "allow")),
        steps=tuple(_step(r, s, i) for i, s in enumerate(steps)),
        env=dict(env),
        services=parsed_services,
        ports=tuple(ports),
        allow=r.strings(raw.get("allow", []), ("allow",)),
        secrets=dict(bound),
        idle_timeout=r.integer(raw.get("idle_timeout", 1800), ("idle_timeout",), 0, 365 * 86400),
        ready=_ready(r, raw["ready"]) if "ready" in raw else None,
    )
