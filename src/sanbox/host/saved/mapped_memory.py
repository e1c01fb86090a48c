"""The memory a running VM maps privately (copy-on-write): where it lives (`mapped_file`, in the
VM's run dir, gone with the VM process), a resume's own saved memory moved there and checked
(`take_memory`, `check_taken`: the check runs while the VM process starts, before anything of
the state loads), and a snapshot's image that many VMs map, checked once (`verify_memory`) and
given each VM's own name (`link_mapped`)."""

from __future__ import annotations

import os
from pathlib import Path

from . import memfile
from .memory import MEMORY, SavedState, StateError

MAPPED = "memory.mapped"


def mapped_file(run_dir: Path) -> Path:
    """Where the saved memory a running VM maps privately lives: in its run dir, so that a
    stop, a new pause or a drop of the saved state never removes it under the VM. It goes when
    the VM process does (`Machines.kill_vm`)."""
    return run_dir / MAPPED


def take_memory(state_dir: Path, mapped: Path) -> None:
    """A resume's own saved RAM moved to `mapped` (no copy: a rename), not yet checked:
    `check_taken` must pass before anything of the saved state loads; StateError(missing)."""
    mapped.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(state_dir / MEMORY, mapped)
    except FileNotFoundError:
        raise StateError("missing", "the memory file is gone") from None


def check_taken(mapped: Path, saved: SavedState, key: bytes) -> None:
    """Check a taken file in one read pass: StateError(corrupt), and `mapped` gone, unless it
    matches the saved state's digests."""
    try:
        memfile.verify(mapped, saved.memory_bytes, saved.chunks(), key)
    except memfile.MemoryCorruptError as exc:
        mapped.unlink(missing_ok=True)
        raise StateError("corrupt", str(exc)) from exc
    except BaseException:
        mapped.unlink(missing_ok=True)
        raise


def verify_memory(state_dir: Path, saved: SavedState, key: bytes) -> None:
    """Check a saved state's memory file where it lies (one read pass), for states mapped by
    many VMs (a snapshot's forks): check once, then map it N times; StateError(corrupt)."""
    try:
        memfile.verify(state_dir / MEMORY, saved.memory_bytes, saved.chunks(), key)
    except memfile.MemoryCorruptError as exc:
        raise StateError("corrupt", str(exc)) from exc


def link_mapped(memory_file: Path, mapped: Path) -> None:
    """Give a VM its own name for a memory file many VMs map (a hard link: no copy, the same
    pages), so it is accounted and removed with the VM like a resumed VM's own."""
    mapped.parent.mkdir(parents=True, exist_ok=True)
    mapped.unlink(missing_ok=True)
    try:
        os.link(memory_file, mapped)
    except FileNotFoundError:
        raise StateError("missing", f"no memory file at {memory_file}") from None
