"""The files of template services: where they are, the status files (written by the supervisor,
read by the agent's ``services`` control op) and the bounded logs.

In a guest: the configuration ``/etc/sanbox/services.json``, logs
``/var/log/sanbox/services/NAME.log`` (+ ``NAME.log.1``), statuses
``/run/sanbox/services/NAME.json``. Outside a VM (the component tier runs the supervisor and the
agent as local processes) every one of these lives under ``$SANBOX_SERVICES_ROOT`` instead of ``/``.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from .service_config import LOG_LIMIT, NAME, should_rotate

ROOT_ENV = "SANBOX_SERVICES_ROOT"
STATES = frozenset({"running", "backoff", "exited", "stopped"})
PUBLIC = ("name", "state", "pid", "restarts", "last_exit", "started_at")
MAX_STATUS_FILES = 64
MAX_STATUS_BYTES = 16 * 1024


@dataclass(frozen=True)
class ServicePaths:
    root: str = "/"

    def _at(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    @property
    def config(self) -> str:
        return self._at("/etc/sanbox/services.json")

    @property
    def log_dir(self) -> str:
        return self._at("/var/log/sanbox/services")

    @property
    def status_dir(self) -> str:
        return self._at("/run/sanbox/services")

    def log(self, name: str) -> str:
        return os.path.join(self.log_dir, f"{name}.log")

    def status(self, name: str) -> str:
        return os.path.join(self.status_dir, f"{name}.json")


def paths() -> ServicePaths:
    return ServicePaths(os.environ.get(ROOT_ENV) or "/")


# -- status files ---------------------------------------------------------------------------------


def write_status(where: ServicePaths, status: dict[str, Any]) -> None:
    """Replace NAME.json at once (tmp + rename): a reader sees the old status or the new one."""
    os.makedirs(where.status_dir, exist_ok=True)
    final = where.status(status["name"])
    tmp = os.path.join(where.status_dir, f".{status['name']}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(status, f)
    os.replace(tmp, final)


def remove_status(where: ServicePaths, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(where.status(name))


def _load(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_STATUS_BYTES + 1)[:MAX_STATUS_BYTES])
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def status_files(where: ServicePaths) -> list[tuple[str, dict[str, Any]]]:
    """(name, contents) of every readable status file, by name, at most 64."""
    try:
        names = sorted(os.listdir(where.status_dir))
    except OSError:
        return []
    found: list[tuple[str, dict[str, Any]]] = []
    for entry in names:
        name = entry.removesuffix(".json")
        if entry.endswith(".json") and NAME.fullmatch(name):
            data = _load(os.path.join(where.status_dir, entry))
            if data is not None and data.get("name") == name:
                found.append((name, data))
                if len(found) >= MAX_STATUS_FILES:
                    break
    return found


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def public_status(data: dict[str, Any]) -> dict[str, Any] | None:
    """The documented fields of one status file, or ``None`` if it is not well-formed."""
    status = {key: data.get(key) for key in PUBLIC}
    last_exit, started = status["last_exit"], status["started_at"]
    exit_ok = last_exit is None or (
        isinstance(last_exit, dict)
        and set(last_exit) == {"code", "signal"}
        and all(v is None or _is_int(v) for v in last_exit.values())
    )
    ok = (
        status["state"] in STATES
        and (status["pid"] is None or _is_int(status["pid"]))
        and _is_int(status["restarts"])
        and (started is None or _is_int(started) or isinstance(started, float))
        and exit_ok
    )
    return status if ok else None


def read_statuses(where: ServicePaths | None = None) -> list[dict[str, Any]]:
    """Every service's status, by name (the agent's ``services`` control op)."""
    found = [public_status(data) for _name, data in status_files(where or paths())]
    return [s for s in found if s is not None]


# -- logs -----------------------------------------------------------------------------------------


class ServiceLog:
    """A service's output on disk, at most ``limit`` bytes in NAME.log plus one rotated NAME.log.1.
    Writes that fail (a full disk) are dropped: a log must never stop its service."""

    def __init__(self, path: str, limit: int = LOG_LIMIT) -> None:
        self.path = path
        self.limit = limit
        self._file: BinaryIO | None = None
        self._size = 0

    def _open(self) -> BinaryIO:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        self._size = os.fstat(fd).st_size
        return os.fdopen(fd, "ab", buffering=0)

    def write(self, data: bytes) -> None:
        try:
            if self._file is None:
                self._file = self._open()
            if should_rotate(self._size, len(data), self.limit):
                self._file.close()
                self._file = None
                os.replace(self.path, self.path + ".1")
                self._file = self._open()
            self._file.write(data)
            self._size += len(data)
        except OSError:
            pass

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


# -- processes left by a supervisor that died -----------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), if it leads its own session: a
    service's ``sh`` does. ``None`` for any other process, or none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    try:
        state, pgrp, session, ticks = fields[0], int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None
    if state in ("Z", "X") or pgrp != pid or session != pid:
        return None
    return ticks
