"""A build's context: the spec file and the files its `copy` steps name, carried as one tar.

The CLI packs it (`pack`: only the spec and the files it copies, so nothing else in the folder,
say a `.env`, leaves the user's machine); the server unpacks it in memory (`unpack`), refusing
anything but regular files at clean relative paths, and bounding their number and size. Pure:
bytes in, bytes out."""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .spec import Spec, SpecError, parse
from .tar_scan import MAX_NAME, Limits, TarScanError, plain, scan

SPEC_FILE = "sanbox.toml"
MAX_FILES = 256
MAX_BYTES = 64 * 1024 * 1024  # the whole context, unpacked
MAX_TAR_BYTES = MAX_BYTES + 1024 * 1024  # the plain tar: its files, headers and padding
MAX_SPEC_BYTES = 256 * 1024
LIMITS = Limits(max_files=MAX_FILES, max_bytes=MAX_BYTES, max_tar_bytes=MAX_TAR_BYTES)


class ContextError(ValueError):
    """A context that cannot be used, with the reason."""


@dataclass(frozen=True)
class Context:
    spec_text: str
    spec: Spec
    files: dict[str, bytes]  # by the relative path a copy step names


def _clean(name: str) -> str:
    path = PurePosixPath(name)
    if len(name) > MAX_NAME:
        raise ContextError(f"a path in the context is over {MAX_NAME} characters")
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ContextError(f"{name!r} is not a relative path inside the context")
    return str(path)


def _spec_path(path: Path) -> Path:
    if path.is_dir():
        path = path / SPEC_FILE
    if not path.is_file():
        raise ContextError(f"{path} is not a file: give a spec file or a folder with {SPEC_FILE}")
    return path


def read_inside(folder: Path, relative: str, limit: int = MAX_BYTES) -> bytes:
    """The regular file at `relative` inside `folder`, opened one component at a time with
    O_NOFOLLOW: no symlink anywhere on the path (in the folder or out of it), no `..`, no
    absolute path, nothing but a regular file (a fifo, a device, a directory are refused), and
    at most `limit` bytes. Whatever the path looks like, what is read is inside the folder."""
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute() or ".." in parts or "\x00" in relative:
        raise ContextError(f"{relative!r} is not a relative path inside {folder}")
    refused = ContextError(
        f"{relative!r} in {folder} is not a regular file inside the folder (symlinks, fifos "
        "and devices are not packed: copy the file itself into the folder)"
    )
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            flags |= os.O_NONBLOCK if last else os.O_DIRECTORY  # a fifo opens, then is refused
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:  # ELOOP: a symlink; ENOTDIR; ENOENT
                if exc.errno == errno.ENOENT:
                    raise ContextError(f"{relative!r} is not a file in {folder}") from None
                raise refused from None
            os.close(fd)
            fd = child
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refused
        if info.st_size > limit:
            raise ContextError(f"{relative!r} is over {limit >> 20} MiB")
        with os.fdopen(os.dup(fd), "rb") as f:
            os.set_blocking(f.fileno(), True)
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    real, top = os.path.realpath(folder / relative), os.path.realpath(folder)
    if os.path.commonpath([real, top]) != top or len(data) > limit:
        raise refused
    return data


def pack(path: Path) -> tuple[bytes, Spec]:
    """The context of the spec at `path` (a file, or a folder with sanbox.toml), as a tar; the
    spec is checked here first, so a bad one is refused before anything is sent. The spec and
    every file it copies are read by `read_inside` its folder."""
    spec_file = _spec_path(path)
    folder = Path(os.path.realpath(spec_file.parent))
    try:
        text = read_inside(folder, spec_file.name, MAX_SPEC_BYTES).decode()
    except UnicodeDecodeError:
        raise SpecError(str(spec_file), 0, "not UTF-8 text") from None
    spec = parse(text, str(spec_file))
    out = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=out, mode="w") as tar:
        _add(tar, SPEC_FILE, text.encode())
        for src in sorted({s.src for s in spec.steps if s.kind == "copy"}):
            try:
                data = read_inside(folder, src, MAX_BYTES - total)
            except ContextError as exc:
                raise ContextError(
                    f"{spec_file}: copy names {src}, which is not a file there: {exc}"
                ) from None
            total += len(data)
            _add(tar, src, data)
    return out.getvalue(), spec


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def unpack(data: bytes, where: str = SPEC_FILE) -> Context:
    """The context in a tar (plain or gzip): ContextError, or SpecError for the spec itself.
    Every header is counted first (`tar_scan`); the server calls this in a bounded worker
    process (`context_worker`), never on its event loop."""
    files: dict[str, bytes] = {}
    total = 0
    try:
        tar_bytes = plain(data, MAX_TAR_BYTES)
        scan(tar_bytes, LIMITS)
    except TarScanError as exc:
        raise ContextError(str(exc)) from None
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            for member in tar:
                if member.isdir():
                    continue
                if not member.isreg():
                    raise ContextError(f"{member.name!r} is not a regular file")
                name = _clean(member.name)
                if name in files:
                    raise ContextError(f"{name!r} is in the context twice")
                if len(files) >= MAX_FILES:
                    raise ContextError(f"more than {MAX_FILES} files in the context")
                total += member.size
                if total > MAX_BYTES:
                    raise ContextError(f"the context is over {MAX_BYTES // 2**20} MiB")
                f = tar.extractfile(member)
                files[name] = f.read() if f is not None else b""
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ContextError(f"the context is not a tar archive: {exc}") from None
    raw = files.pop(SPEC_FILE, None)
    if raw is None:
        raise ContextError(f"the context has no {SPEC_FILE}")
    if len(raw) > MAX_SPEC_BYTES:
        raise ContextError(f"{SPEC_FILE} is over {MAX_SPEC_BYTES // 1024} KiB")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise SpecError(where, 0, "not UTF-8 text") from None
    spec = parse(text, where)
    for step in spec.steps:
        if step.kind == "copy" and step.src not in files:
            raise ContextError(f"copy names {step.src}, which the context does not hold")
    return Context(text, spec, files)
