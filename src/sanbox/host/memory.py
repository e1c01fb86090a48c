"""A computer's saved memory: the VM's device state and its RAM file, written under temporary
names, fsynced, renamed, and recorded last in a manifest. A state is used only if its manifest is
there, its files match it and it was made by a compatible hypervisor; otherwise the reason is
said (`missing`, `corrupt`, `incompatible`) and the computer boots fresh on its disk."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .disk.clone import sparse_copy_path
from .durable import fsync_path
from .errors import HostError

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
    saved_at: float
    seconds: float

    @property
    def size(self) -> int:
        return self.vmstate_bytes + self.memory_allocated


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write(
    state_dir: Path, vmstate_tmp: Path, ram_file: Path, compat: dict[str, Any], started: float
) -> SavedState:
    """Make the saved state durable: RAM copied beside the device state, both fsynced and
    renamed, the manifest written last."""
    memory_tmp = state_dir / f"{MEMORY}.tmp"
    try:
        sparse_copy_path(ram_file, memory_tmp)
        for path in (vmstate_tmp, memory_tmp):
            fsync_path(path)
        saved = SavedState(
            compat=compat,
            vmstate_sha256=_sha256(vmstate_tmp),
            vmstate_bytes=vmstate_tmp.stat().st_size,
            memory_bytes=memory_tmp.stat().st_size,
            memory_allocated=memory_tmp.stat().st_blocks * 512,
            saved_at=time.time(),
            seconds=time.monotonic() - started,
        )
        discard(state_dir)  # an older state goes first: its manifest, then its files
        os.rename(vmstate_tmp, state_dir / VMSTATE)
        os.rename(memory_tmp, state_dir / MEMORY)
        manifest_tmp = state_dir / f"{MANIFEST}.tmp"
        manifest_tmp.write_text(json.dumps(asdict(saved), indent=2))
        fsync_path(manifest_tmp)
        os.rename(manifest_tmp, state_dir / MANIFEST)
        fsync_path(state_dir)
        return saved
    finally:
        for tmp in (vmstate_tmp, memory_tmp, state_dir / f"{MANIFEST}.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()


def exists(state_dir: Path) -> bool:
    return (state_dir / MANIFEST).is_file()


def load(state_dir: Path, compat: dict[str, Any]) -> SavedState:
    """The saved state, checked; StateError(missing | corrupt | incompatible) if unusable."""
    try:
        data = json.loads((state_dir / MANIFEST).read_text())
    except FileNotFoundError:
        raise StateError("missing", "no complete saved state") from None
    except (OSError, ValueError) as exc:
        raise StateError("corrupt", f"unreadable manifest: {exc}") from exc
    try:
        saved = SavedState(**data)
    except TypeError as exc:
        raise StateError("corrupt", f"malformed manifest: {exc}") from exc
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
