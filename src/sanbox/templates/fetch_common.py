"""What the three fetchers share: the `Bundle` they return, its content key, the cache that keeps
bundles by key, and a bounded way to run the host's package tools.

A bundle is an org's own: its key is the content key with the org's id (`org_key`), so an org
never learns by a fetch's speed what another one fetched (the cache does not share bundles across
orgs). A bundle lives in `cache_dir/bundles/<kind>-<key>/`: `files/` (pushed as is into the guest at
`guest_dir`) and `bundle.json` (the rest of the Bundle). It is built in a temporary folder under
`cache_dir/tmp/` and renamed into place, so a folder under `bundles/` is always complete; a lock
file per key makes a second fetch of the same key wait for the first and then reuse its bundle.

What a fetch may write is bounded while it writes, not after: before a fetch the cache is pruned
(`fetch_cache`: old bundles, then the oldest past its size bound) and the fetch is refused when
the data filesystem's free space, less what the fetch may take, would fall below the host's
reserve (`keep_free`: its disk low watermark); while a tool runs its staging folder is measured
every `WATCH_INTERVAL` seconds, and the tool's process group is killed once the folder holds more
than `STAGING_FACTOR` times the bundle limit (the tool's own cache and unpacked files count too)
or the filesystem's free space falls below the reserve.

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
from .fetch_cache import BUNDLE_MAX_AGE, prune
from .package_names import PackageNameError, check_all

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 2 << 30  # a bundle larger than this is refused
DEFAULT_TIMEOUT = 1800.0  # seconds one host tool may run
OUTPUT_TAIL = 2000  # characters of a failed tool's output kept in the error
STAGING_FACTOR = 2  # a staging folder may hold this many times the bundle limit while fetching
WATCH_INTERVAL = 0.2  # seconds between two measures of a running tool's staging folder
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


def org_key(org: str, key: str) -> str:
    """The bundle key of content `key` fetched for `org` ("": unscoped, as tools and tests call)."""
    return hashlib.sha256(f"{org}\0{key}".encode()).hexdigest() if org else key


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


@dataclass(frozen=True)
class DiskBound:
    """What a running tool may make on disk: `folder` holds at most `max_bytes`, and the
    filesystem under it keeps `keep_free` bytes free. Past either, the tool is killed and the
    fetch fails, for `kind`'s step."""

    kind: str
    folder: Path
    max_bytes: int
    keep_free: int = 0

    def breach(self) -> str | None:
        """Why the tool must stop now, or None."""
        used = disk_used(self.folder)
        if used > self.max_bytes:
            return (
                f"the packages came to more than {self.max_bytes >> 20} MiB on the host while "
                "being fetched (the bundle limit, with the tools' own copies): split the step "
                "or use fewer or smaller packages"
            )
        if self.keep_free and shutil.disk_usage(self.folder).free < self.keep_free:
            log.warning("a %s fetch was stopped: the data filesystem is full", self.kind)
            return "the host ran short of disk space while fetching: try again later"
        return None


def staging_bound(kind: str, work: Path, max_bytes: int, keep_free: int = 0) -> DiskBound:
    """The bound of a fetch's tools: `work` is `cached_bundle`'s, so its parent is the staging
    folder (the bundle's files and the tools' work), which may hold STAGING_FACTOR x max_bytes."""
    return DiskBound(kind, work.parent, STAGING_FACTOR * max_bytes, keep_free)


def disk_used(root: Path) -> int:
    """Bytes the files under `root` take on disk (never following a link), however many."""
    total, stack = 0, [str(root)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
    return total


def _wait(proc: subprocess.Popen[bytes], timeout: float, bound: DiskBound | None) -> int:
    """The tool's exit code; TimeoutExpired past `timeout`; FetchError once `bound` is passed."""
    if bound is None:
        return proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return proc.wait(timeout=max(0.0, min(WATCH_INTERVAL, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        if (why := bound.breach()) is not None:
            raise FetchError(bound.kind, why)


def run_tool(
    argv: Sequence[str],
    *,
    work: Path,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    keep: int = 64 * 1024,
    log_dir: Path | None = None,
    cwd: Path | None = None,
    bound: DiskBound | None = None,
) -> ToolResult:
    """Run a host tool with output to a file in `log_dir` (default `work`; bounded memory), and
    keep its tail. It runs in its own session, its process group killed at the end, or as soon
    as it passes `bound` (FetchError); a child that left the group (`setsid`) is ended by the
    sandbox's PID namespace (`fetch_policy.reaped_argv`), not here."""
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
                code = _wait(proc, timeout, bound)
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
    keep_free: int = 0,
    org: str = "",
) -> Bundle:
    """The bundle named `key` (for `org`: `org_key`): from the cache, or made by
    `build(files_dir, work_dir)` in a temporary folder, checked against `max_bytes`, and renamed
    into the cache. Before it is made the cache is pruned, and it is refused unless the
    filesystem keeps `keep_free` bytes free with the staging folder full (`staging_bound`: the
    bound `build`'s tools run under)."""
    key = org_key(org, key)
    final = cache_dir / "bundles" / f"{kind}-{key}"
    if (hit := _load(final)) is not None:
        return hit
    prune(cache_dir)  # the cache's bounds hold before each fetch adds to it
    (cache_dir / "tmp").mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(cache_dir).free < keep_free + STAGING_FACTOR * max_bytes:
        log.warning("a %s fetch was refused: the data filesystem is short of space", kind)
        raise FetchError(kind, "the host is short of disk space to fetch packages: try again later")
    with locked(cache_dir / "locks" / f"{kind}-{key}.lock"):
        if (hit := _load(final)) is not None:  # another fetch made it while we waited
            return hit
        shutil.rmtree(final, ignore_errors=True)  # stale or damaged: fetched again
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
