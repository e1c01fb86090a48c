"""What the three fetchers share: the `Bundle` they return, its content key, the cache that keeps
bundles by key, and a bounded way to run the host's package tools.

A bundle lives in `cache_dir/bundles/<kind>-<key>/`: `files/` (pushed as is into the guest at
`guest_dir`) and `bundle.json` (the rest of the Bundle). It is built in a temporary folder under
`cache_dir/tmp/` and renamed into place, so a folder under `bundles/` is always complete; a lock
file per key makes a second fetch of the same key wait for the first and then reuse its bundle.

Fetching is blocking (it runs apt-get, pip, npm): call it from a thread in async code."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..host.errors import MissingToolError
from ..host.image.errors import BuildStepError
from .package_names import PackageNameError, check_all

log = logging.getLogger(__name__)

BUNDLE_MAX_AGE = 7 * 86400  # seconds a bundle is reused; then fetched again (a moved index)
DEFAULT_MAX_BYTES = 2 << 30  # a bundle larger than this is refused
DEFAULT_TIMEOUT = 1800.0  # seconds one host tool may run
OUTPUT_TAIL = 2000  # characters of a failed tool's output kept in the error
GUEST_ROOT = "/var/tmp/sanbox-fetch"
INSTALL_SCRIPT = "install.sh"


class FetchError(BuildStepError):
    """A package step's packages could not be fetched on the host: which step, and why (one
    line that names the package and what to do)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind} fetch", reason)
        self.kind = kind
        self.reason = reason


@dataclass(frozen=True)
class Bundle:
    """Files to push into the guest and the command that installs them there, offline.

    The build copies every file under `path` to the same relative path under `guest_dir` and
    then runs `install` (as root) in the guest. `key` (sha256 of the inputs) names the bundle."""

    kind: str  # apt | pip | npm
    key: str
    path: Path  # host folder of the files
    guest_dir: str
    install: tuple[str, ...]
    files: tuple[str, ...]  # relative to path, sorted
    size: int  # bytes, all files

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "guest_dir": self.guest_dir,
            "install": list(self.install),
            "files": list(self.files),
            "size": self.size,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path) -> Bundle:
        return cls(
            kind=data["kind"],
            key=data["key"],
            path=path,
            guest_dir=data["guest_dir"],
            install=tuple(data["install"]),
            files=tuple(data["files"]),
            size=int(data["size"]),
        )


def content_key(kind: str, inputs: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of what determines a bundle's content."""
    text = json.dumps({"kind": kind, **inputs}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def guest_dir_for(key: str) -> str:
    return f"{GUEST_ROOT}/{key[:16]}"


def install_argv(key: str) -> tuple[str, ...]:
    return ("/bin/sh", f"{guest_dir_for(key)}/{INSTALL_SCRIPT}")


def check_names(kind: str, packages: Sequence[str]) -> tuple[str, ...]:
    """Package names as the tools will get them: registry packages only (`package_names`, the
    spec's own check, again here: whoever calls a fetcher, it fetches nothing else)."""
    if not packages:
        raise FetchError(kind, f"{kind} lists no package")
    try:
        return check_all(kind, list(packages))
    except PackageNameError as exc:
        raise FetchError(kind, f"not a package name: {exc}") from None


def tree_files(root: Path) -> tuple[list[str], int]:
    """Relative paths of the files under root, sorted, and their total size. Only regular files
    and folders may be there (the tools' output: a symlink would make root read elsewhere)."""
    files, size = [], 0
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            files.append(str(path.relative_to(root)))
            size += info.st_size
        elif not stat.S_ISDIR(info.st_mode):
            log.warning("a fetched bundle holds a non-regular file %s", path)
            raise FetchError("bundle", "the fetched packages hold something that is not a file")
    return files, size


def output_tail(text: str, limit: int = OUTPUT_TAIL) -> str:
    """The last lines of a tool's output, on one line, at most `limit` characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    tail = " | ".join(lines[-8:])
    return tail if len(tail) <= limit else "…" + tail[-limit:]


def unknown_failure(kind: str, what: Sequence[str], output: str) -> str:
    """The reason a tenant reads for a failure no pattern knows: generic, while the tool's own
    words (addresses, proxy errors, host paths) go to the server's log only."""
    log.warning("%s fetch of %s failed: %s", kind, " ".join(what), output_tail(output))
    return (
        f"could not fetch {' '.join(what)[:200]} from the package registry; try again, or "
        "check the name"
    )


def require(tool: str, package: str) -> str:
    path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if path is None:
        raise MissingToolError(tool, package)
    return path


@dataclass(frozen=True)
class ToolResult:
    returncode: int
    output: str  # stdout and stderr, the last `keep` bytes


def run_tool(
    argv: Sequence[str],
    *,
    work: Path,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    keep: int = 64 * 1024,
    log_dir: Path | None = None,
    cwd: Path | None = None,
) -> ToolResult:
    """Run a host tool with output to a file in `log_dir` (default `work`; bounded memory), and
    keep its tail. It runs in its own session, killed whole at the end (nothing it started
    outlives it)."""
    log_file = (log_dir or work) / f"{Path(argv[0]).name}.log"
    with log_file.open("wb") as out:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
            try:
                code = proc.wait(timeout=timeout)
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        except subprocess.TimeoutExpired:
            code = -1
        except OSError as exc:
            return ToolResult(127, f"{argv[0]}: {exc}")
    with log_file.open("rb") as f:
        f.seek(max(0, log_file.stat().st_size - keep))
        text = f.read().decode(errors="replace")
    if code == -1:
        text += f"\n{argv[0]} did not finish within {timeout:.0f} s"
    return ToolResult(code, text)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _load(final: Path, max_age: float = BUNDLE_MAX_AGE) -> Bundle | None:
    """The bundle in `final`, unless it is missing, damaged or older than `max_age`."""
    try:
        if time.time() - (final / "bundle.json").stat().st_mtime > max_age:
            return None
        data = json.loads((final / "bundle.json").read_text())
    except (OSError, ValueError):
        return None
    return Bundle.from_json(data, final / "files")


def traversable(path: Path) -> bool:
    """Whether any user can pass through every folder from / down to `path`."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def cached_bundle(
    cache_dir: Path,
    kind: str,
    key: str,
    build: Callable[[Path, Path], None],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Bundle:
    """The bundle named `key`: from the cache, or made by `build(files_dir, work_dir)` in a
    temporary folder, checked against `max_bytes`, and renamed into the cache."""
    final = cache_dir / "bundles" / f"{kind}-{key}"
    if (hit := _load(final)) is not None:
        return hit
    with locked(cache_dir / "locks" / f"{kind}-{key}.lock"):
        if (hit := _load(final)) is not None:  # another fetch made it while we waited
            return hit
        shutil.rmtree(final, ignore_errors=True)  # stale or damaged: fetched again
        (cache_dir / "tmp").mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{kind}-{key[:16]}-", dir=cache_dir / "tmp"))
        staging.chmod(0o711)  # the fetch user reaches its own folders inside, nothing else
        try:
            files_dir, work = staging / "files", staging / "work"
            files_dir.mkdir()
            work.mkdir()
            build(files_dir, work)
            files, size = tree_files(files_dir)
            if size > max_bytes:
                raise FetchError(
                    kind,
                    f"the packages come to {size >> 20} MiB, more than the "
                    f"limit of {max_bytes >> 20} MiB: split the step or "
                    "raise the limit",
                )
            bundle = Bundle(
                kind, key, files_dir, guest_dir_for(key), install_argv(key), tuple(files), size
            )
            shutil.rmtree(work)
            (staging / "bundle.json").write_text(json.dumps(bundle.to_json(), indent=1))
            final.parent.mkdir(parents=True, exist_ok=True)
            staging.chmod(0o755)
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    loaded = _load(final)
    assert loaded is not None
    return loaded


def write_script(files_dir: Path, text: str) -> None:
    script = files_dir / INSTALL_SCRIPT
    script.write_text(text)
    script.chmod(0o755)


def quote_all(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)
