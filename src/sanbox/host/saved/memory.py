"""A computer's saved memory: the VM's device state and its RAM file, written under temporary
names, fsynced, renamed, and recorded last in a manifest. The manifest holds a digest of every
chunk of memory (keyed BLAKE3, `memfile`) and is itself MACed under the host's key, so a changed
byte of memory, a changed manifest or a state made on another host is refused. A state is used
only if its manifest is there and genuine, its files match it (memory checked chunk by chunk
before the guest's state loads: where it lies when it is mapped, `mapped_memory.py`, or as it
is copied back, `restore_memory`) and it was made by a compatible hypervisor; otherwise the
reason is said (`missing`, `corrupt`, `incompatible`) and the computer boots fresh on its disk.

A resume maps the saved RAM privately (copy-on-write) instead of copying it: the file moves to the
VM's run dir (`mapped_memory.py`) and lives there until the VM process ends. Such a VM's RAM is
not a shared file, so its migration stream carries the RAM. Its pause writes the pages the guest
changed into that file where the driver can (`write_in_place`: the file becomes the new state's
memory, no pass over the rest), else takes the RAM out of the stream into a new memory file
(`write_from_stream`); the saved state has the same form every way."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import blake3

from ..data.durable import fsync_path
from ..disk.clone import copy_extents_but
from ..drivers.errors import SavedStateError
from ..errors import HostError
from . import memfile

MANIFEST = "manifest.json"
VMSTATE = "vmstate"
MEMORY = "memory"


class StateError(HostError):
    """A saved state that cannot be used; `reason` says why, in the words users see."""

    code = "state_unusable"

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"state {reason}" + (f": {detail}" if detail else ""))
        self.reason = reason


class PauseError(HostError):
    code = "pause_failed"


@dataclass(frozen=True)
class MemoryOutcome:
    """What a start or resume did with the computer's memory."""

    restored: bool
    reason: str | None = None  # why it was lost

    def __str__(self) -> str:
        return "restored" if self.restored else f"lost ({self.reason})"


@dataclass(frozen=True)
class SavedState:
    compat: dict[str, Any]  # what must match to load it: hypervisor build, vCPUs, memory
    vmstate_sha256: str
    vmstate_bytes: int
    memory_bytes: int  # apparent size of the RAM file
    memory_allocated: int  # bytes actually written
    memory_chunks: list[list[int | str]]  # [offset, length, keyed BLAKE3] of each chunk saved
    saved_at: float
    seconds: float
    mac: str = ""  # keyed BLAKE3 of the rest of the manifest

    def chunks(self) -> list[memfile.Chunk]:
        try:
            return [memfile.Chunk.of(raw) for raw in self.memory_chunks]
        except ValueError as exc:
            raise StateError("corrupt", str(exc)) from exc

    @property
    def size(self) -> int:
        return self.vmstate_bytes + self.memory_allocated


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _mac(fields: dict[str, Any], key: bytes) -> str:
    body = json.dumps({k: v for k, v in fields.items() if k != "mac"}, sort_keys=True)
    return blake3.blake3(body.encode(), key=key).hexdigest()


def write(
    state_dir: Path,
    vmstate_tmp: Path,
    ram_file: Path,
    compat: dict[str, Any],
    started: float,
    key: bytes,
) -> SavedState:
    """Make the saved state durable: RAM copied (and digested) beside the device state, both
    fsynced and renamed, the MACed manifest written last. `key` is the host's memory key."""
    memory_tmp = state_dir / f"{MEMORY}.tmp"
    try:
        chunks = memfile.save(ram_file, memory_tmp, key)
        return _commit(state_dir, vmstate_tmp, memory_tmp, chunks, compat, started, key)
    finally:
        _remove_tmp(state_dir, vmstate_tmp)


def write_from_stream(
    state_dir: Path,
    stream_tmp: Path,
    memory_bytes: int,
    compat: dict[str, Any],
    started: float,
    key: bytes,
    split: Callable[[Path, Path, Path, int], None],
) -> SavedState:
    """`write` for a VM whose RAM is a private mapping: its saved state (`stream_tmp`) carries
    the RAM, which its driver's `split` takes into the memory file; the device state stays in
    the vmstate."""
    memory_tmp = state_dir / f"{MEMORY}.tmp"
    vmstate_tmp = state_dir / f"{VMSTATE}.devices.tmp"
    try:
        try:
            split(stream_tmp, vmstate_tmp, memory_tmp, memory_bytes)
        except SavedStateError as exc:
            raise PauseError(f"could not read the VM's saved state: {exc}") from exc
        chunks = memfile.digest(memory_tmp, key)
        return _commit(state_dir, vmstate_tmp, memory_tmp, chunks, compat, started, key)
    finally:
        _remove_tmp(state_dir, vmstate_tmp, stream_tmp)


def open_mapped(mapped: Path) -> int | None:
    """The VM's mapped memory file opened read-write for a pause in place, or None if there is
    none. Its run dir is the VM user's: a link there is never followed, and the driver checks
    that the file is the one the VM maps, with one name (`save_state_in_place`)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        return os.open(mapped, flags)
    except OSError:
        return None


def write_in_place(
    state_dir: Path,
    vmstate_tmp: Path,
    memory_fd: int,
    compat: dict[str, Any],
    started: float,
    key: bytes,
) -> SavedState:
    """`write` for a VM whose pause wrote its changed pages into its mapped memory file (open as
    `memory_fd`): that file becomes the state's memory, linked into the state dir by its
    descriptor (never by a name in the VM's run dir), root's again, digested and committed."""
    memory_tmp = state_dir / f"{MEMORY}.tmp"
    try:
        memory_tmp.unlink(missing_ok=True)
        _link_open_file(memory_fd, memory_tmp)
        os.fchown(memory_fd, 0, 0)  # the VM's no more; what it holds open it keeps
        os.fchmod(memory_fd, 0o600)
        chunks = memfile.digest(memory_tmp, key)
        return _commit(state_dir, vmstate_tmp, memory_tmp, chunks, compat, started, key)
    finally:
        _remove_tmp(state_dir, vmstate_tmp)


def new_memory_file(state_dir: Path, size: int) -> int:
    """A new, empty (sparse) memory file of `size` bytes for a state being written, 0600, open
    read-write (`write_beside` finishes it)."""
    memory_tmp = state_dir / f"{MEMORY}.tmp"
    fd = os.open(memory_tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    os.ftruncate(fd, size)
    return fd


def write_beside(
    state_dir: Path,
    vmstate_tmp: Path,
    mapped_fd: int,
    written: list[tuple[int, int]],
    compat: dict[str, Any],
    started: float,
    key: bytes,
) -> SavedState:
    """`write` for a running VM's snapshot whose save wrote the pages its guest changed since
    its resume into `new_memory_file` (the (start, end) ranges `written`): the rest of its RAM
    is its mapped memory file's (open as `mapped_fd`, which nobody writes while it runs),
    copied in beside them; then digested and committed."""
    memory_tmp = state_dir / f"{MEMORY}.tmp"
    try:
        fd = os.open(memory_tmp, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if os.fstat(mapped_fd).st_size != size:
                raise StateError("corrupt", "the mapped memory file has the wrong size")
            copy_extents_but(mapped_fd, fd, size, written)
        finally:
            os.close(fd)
        chunks = memfile.digest(memory_tmp, key)
        return _commit(state_dir, vmstate_tmp, memory_tmp, chunks, compat, started, key)
    finally:
        _remove_tmp(state_dir, vmstate_tmp)


def _link_open_file(fd: int, path: Path) -> None:
    """A new name for the file open as `fd`: linkat(AT_SYMLINK_FOLLOW) of its /proc/self/fd
    link (os.link calls linkat, which follows it, only when given a directory descriptor)."""
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(f"/proc/self/fd/{fd}", path.name, dst_dir_fd=parent, follow_symlinks=True)
    finally:
        os.close(parent)


def _commit(
    state_dir: Path,
    vmstate_tmp: Path,
    memory_tmp: Path,
    chunks: list[memfile.Chunk],
    compat: dict[str, Any],
    started: float,
    key: bytes,
) -> SavedState:
    for path in (vmstate_tmp, memory_tmp):
        fsync_path(path)
    fields = asdict(
        SavedState(
            compat=compat,
            vmstate_sha256=_sha256(vmstate_tmp),
            vmstate_bytes=vmstate_tmp.stat().st_size,
            memory_bytes=memory_tmp.stat().st_size,
            memory_allocated=memory_tmp.stat().st_blocks * 512,
            memory_chunks=[c.as_list() for c in chunks],
            saved_at=time.time(),
            seconds=time.monotonic() - started,
        )
    )
    saved = SavedState(**{**fields, "mac": _mac(fields, key)})
    discard(state_dir)  # an older state goes first: its manifest, then its files
    os.rename(vmstate_tmp, state_dir / VMSTATE)
    os.rename(memory_tmp, state_dir / MEMORY)
    _write_manifest(state_dir, saved)
    return saved


def adopt(state_dir: Path, fields: dict[str, Any], key: bytes) -> SavedState:
    """Seal a saved state whose files (`vmstate`, `memory`) came from another host, checked
    there and on the way: its memory digested anew and its manifest MACed under this host's
    `key` (`fields`: the sender's manifest but its chunks and MAC). StateError(corrupt) if the
    files are not what `fields` say."""
    vmstate, ram = state_dir / VMSTATE, state_dir / MEMORY
    if (
        vmstate.stat().st_size != fields["vmstate_bytes"]
        or _sha256(vmstate) != fields["vmstate_sha256"]
    ):
        raise StateError("corrupt", "the device state does not match its checksum")
    if ram.stat().st_size != fields["memory_bytes"]:
        raise StateError("corrupt", "the memory file has the wrong size")
    chunks = memfile.digest(ram, key)
    allocated = ram.stat().st_blocks * 512
    listed = [c.as_list() for c in chunks]
    saved = SavedState(**{**fields, "memory_allocated": allocated, "memory_chunks": listed})
    saved = SavedState(**{**asdict(saved), "mac": _mac(asdict(saved), key)})
    _write_manifest(state_dir, saved)
    return saved


def _write_manifest(state_dir: Path, saved: SavedState) -> None:
    """The manifest, last and durably: the state exists from this rename on."""
    manifest_tmp = state_dir / f"{MANIFEST}.tmp"
    manifest_tmp.write_text(json.dumps(asdict(saved), indent=2))
    fsync_path(manifest_tmp)
    os.rename(manifest_tmp, state_dir / MANIFEST)
    fsync_path(state_dir)


def clear_unfinished(state_dir: Path) -> None:
    """Remove what a save that did not finish (the process killed) left in the state dir: its
    temporary files, up to a whole RAM's worth, one of them perhaps a second name of a running
    VM's mapped memory (`write_in_place`), which a later save from the stream would truncate.
    Done before anything uses the dir again; a complete state is not touched."""
    _remove_tmp(state_dir, state_dir / f"{VMSTATE}.tmp", state_dir / f"{VMSTATE}.devices.tmp")


def _remove_tmp(state_dir: Path, *tmps: Path) -> None:
    for tmp in (*tmps, state_dir / f"{MEMORY}.tmp", state_dir / f"{MANIFEST}.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def exists(state_dir: Path) -> bool:
    return (state_dir / MANIFEST).is_file()


def load(state_dir: Path, compat: dict[str, Any], key: bytes) -> SavedState:
    """The saved state, checked but for its memory (see `restore_memory`); StateError(missing |
    corrupt | incompatible) if unusable."""
    try:
        data = json.loads((state_dir / MANIFEST).read_text())
    except FileNotFoundError:
        raise StateError("missing", "no complete saved state") from None
    except (OSError, ValueError) as exc:
        raise StateError("corrupt", f"unreadable manifest: {exc}") from exc
    if not isinstance(data, dict) or "mac" not in data:
        raise StateError("incompatible", "saved by an earlier Sanbox, without digests")
    if not isinstance(data["mac"], str) or data["mac"] != _mac(data, key):
        raise StateError("corrupt", "the manifest was changed, or made on another host")
    try:
        saved = SavedState(**data)
    except TypeError as exc:
        raise StateError("corrupt", f"malformed manifest: {exc}") from exc
    saved.chunks()
    vmstate, memory = state_dir / VMSTATE, state_dir / MEMORY
    if not vmstate.is_file() or not memory.is_file():
        raise StateError("missing", "state files are gone")
    if vmstate.stat().st_size != saved.vmstate_bytes or _sha256(vmstate) != saved.vmstate_sha256:
        raise StateError("corrupt", "the device state does not match its checksum")
    if memory.stat().st_size != saved.memory_bytes:
        raise StateError("corrupt", "the memory file has the wrong size")
    changed = {k: (saved.compat.get(k), v) for k, v in compat.items() if saved.compat.get(k) != v}
    if changed:
        what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
        raise StateError("incompatible", f"saved by another hypervisor build or shape ({what})")
    return saved


def restore_memory(state_dir: Path, saved: SavedState, ram_file: Path, key: bytes) -> None:
    """Copy the saved RAM into `ram_file`, every chunk checked against its digest first;
    StateError(corrupt) on a mismatch, and no RAM file is left."""
    try:
        memfile.restore(state_dir / MEMORY, ram_file, saved.memory_bytes, saved.chunks(), key)
    except memfile.MemoryCorruptError as exc:
        raise StateError("corrupt", str(exc)) from exc


def fill_memory(
    state_dir: Path, saved: SavedState, ram_fd: int, key: bytes, *, verified: bool = False
) -> None:
    """Copy the saved RAM into a RAM file made by `memfile.create` (open as `ram_fd`, closed
    here), every chunk checked before it is written, or none if it was checked where it lies
    (`verified`: `mapped_memory.verify_memory`); StateError(corrupt) at a mismatch."""
    try:
        memfile.fill(
            state_dir / MEMORY, ram_fd, saved.memory_bytes, saved.chunks(), key, verified=verified
        )
    except memfile.MemoryCorruptError as exc:
        raise StateError("corrupt", str(exc)) from exc


def forget(state_dir: Path) -> None:
    """Make a saved state unusable at once (its manifest goes, durably): done before a restored
    guest runs, since from then on its disk moves ahead of the saved memory."""
    with contextlib.suppress(FileNotFoundError):
        (state_dir / MANIFEST).unlink()
        fsync_path(state_dir)


def discard(state_dir: Path) -> None:
    """Forget a saved state: the manifest first, so a half-removed state is never used."""
    for name in (MANIFEST, VMSTATE, MEMORY):
        with contextlib.suppress(FileNotFoundError):
            (state_dir / name).unlink()
