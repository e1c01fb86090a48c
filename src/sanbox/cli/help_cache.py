"""`sanbox [COMMAND...] --help` answered as it was answered last time, without loading typer.

Rendering help takes the typer app (the whole one for `sanbox --help`: ~0.3 s of imports and
conversion), so the first `--help` of a command path renders it as always, prints it, and keeps
what it printed; the next one with the same key prints that and exits 0. The
key is everything the rendering reads: the argv, Sanbox's own source files (name, size and
mtime of each: an upgrade or an edit renders anew), the typer, click and rich installed, whether
stdout is a terminal and the size of each standard stream's terminal, stdout's encoding, and the
environment variables rich and typer read. A path's last rendering replaces its previous one, so
the cache holds one small file per command path at most (`$XDG_CACHE_HOME/sanbox/help`, else
`~/.cache/sanbox/help`). A cache that cannot be read or written is passed by: help renders as
without it. Only an answer that exited 0 is kept (an unknown command is not).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, cast

ENV = (
    "COLUMNS",
    "LINES",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "FORCE_COLOR",
    "PY_COLORS",
    "GITHUB_ACTIONS",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "TERMINAL_WIDTH",
    "TYPER_USE_RICH",
    "_TYPER_FORCE_DISABLE_TERMINAL",
    "DATABRICKS_RUNTIME_VERSION",
)
"""The environment variables rich and typer read when they render help."""
LIBRARIES = ("typer", "click", "rich")
WORD = re.compile(r"[a-z][a-z0-9-]{0,31}")
MAX_WORDS = 3  # `sanbox snapshot ls --help` is as deep as the command tree goes


def wanted(argv: list[str]) -> bool:
    """Whether `argv` asks for help on a command path, and nothing else."""
    return (
        0 < len(argv) <= MAX_WORDS + 1
        and argv[-1] == "--help"
        and all(WORD.fullmatch(word) for word in argv[:-1])
    )


def folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sanbox" / "help"


def answer(argv: list[str], render: Callable[[], None]) -> int:
    """Print the help `argv` asks for, kept or rendered by `render` (which prints it, then exits
    through SystemExit as typer does); the exit code."""
    file = folder() / f"{hashlib.sha256(' '.join(argv).encode()).hexdigest()[:16]}.json"
    key = _key(argv)
    kept = _read(file)
    if kept is not None and kept.get("key") == key:
        sys.stdout.write(str(kept["out"]))
        sys.stdout.flush()
        return 0  # only an answer that exited 0 is kept
    tee = _Tee(sys.stdout)
    sys.stdout = cast(TextIO, tee)
    try:
        render()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdout = tee.real
        tee.real.flush()
    if code == 0 and tee.kept.getvalue():
        _write(file, {"key": key, "out": tee.kept.getvalue()})
    return code


def _key(argv: list[str]) -> str:
    digest = hashlib.sha256()
    parts: list[object] = [
        argv,
        sys.version,
        sys.executable,
        sys.stdout.isatty(),
        getattr(sys.stdout, "encoding", None),
        [_terminal_size(fd) for fd in (0, 1, 2)],
        [os.environ.get(name) for name in ENV],
    ]
    for library in LIBRARIES:
        spec = importlib.util.find_spec(library)
        parts.append(_stat(spec.origin) if spec is not None and spec.origin else None)
    digest.update(json.dumps(parts).encode())
    digest.update("".join(_sources(Path(__file__).parents[1])).encode())
    return digest.hexdigest()


def _sources(root: Path) -> list[str]:
    """Every .py file under Sanbox's package, by relative name, size and mtime."""
    lines: list[str] = []
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__" and not entry.name.startswith("."):
                        stack.append(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    lines.append(
                        f"{os.path.relpath(entry.path, root)} {st.st_size} {st.st_mtime_ns}\n"
                    )
    return lines


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _terminal_size(fd: int) -> list[int] | None:
    try:
        return list(os.get_terminal_size(fd))
    except OSError:
        return None


def _read(file: Path) -> dict[str, object] | None:
    try:
        kept = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) else None


def _write(file: Path, kept: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        part = file.with_name(f".{file.name}.{os.getpid()}")
        part.write_text(json.dumps(kept), encoding="utf-8")
        os.replace(part, file)


class _Tee(io.TextIOBase):
    """stdout as the renderer sees it: what it writes goes to the real stdout and is kept; it
    answers for a terminal as the real one does."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.kept = io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.real.write(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return self.real.isatty()

    def fileno(self) -> int:
        return self.real.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.real.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.real.errors
