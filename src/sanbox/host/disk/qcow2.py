"""qcow2 overlays with `qemu-img`: a thin copy-on-write file on a read-only base, made in constant
time whatever the base's size and whatever the filesystem (no reflink needed), and what a chain of
them looks like."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import DiskError

DiskFormat = Literal["raw", "qcow2"]
QEMU_IMG = "qemu-img"
TIMEOUT = 60.0


def _run(*args: str) -> str:
    try:
        out = subprocess.run(
            [QEMU_IMG, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except FileNotFoundError:
        raise DiskError("qemu-img is missing: install qemu-utils") from None
    except subprocess.TimeoutExpired:
        raise DiskError(f"qemu-img {args[0]} took longer than {TIMEOUT:.0f}s") from None
    if out.returncode != 0:
        raise DiskError(f"qemu-img {args[0]} failed: {out.stderr.strip() or out.returncode}")
    return out.stdout


def format_of(path: Path) -> DiskFormat:
    """A disk's format, by its name: `*.qcow2` overlays, everything else raw."""
    return "qcow2" if path.suffix == ".qcow2" else "raw"


def create_overlay(base: Path, dest: Path, size_bytes: int) -> None:
    """A new qcow2 file at `dest` of `size_bytes` whose unwritten clusters read from `base` (by
    its absolute path, which must never change while anything is backed by it)."""
    _run("create", "-q", "-f", "qcow2", "-o", "cluster_size=65536", "-b",
         str(base.resolve()), "-F", format_of(base), str(dest), str(size_bytes))  # fmt: skip


def resize(path: Path, size_bytes: int) -> None:
    """Grow a qcow2 file's virtual size (the VM must not be running)."""
    _run("resize", "-q", "-f", "qcow2", str(path), str(size_bytes))


@dataclass(frozen=True)
class Layer:
    path: Path
    format: DiskFormat
    virtual_size: int
    allocated: int  # bytes the file takes on its filesystem


def chain(path: Path) -> list[Layer]:
    """The disk and its backing files, top first."""
    infos = json.loads(_run("info", "--output=json", "--backing-chain", "-U", str(path)))
    return [
        Layer(
            Path(i["filename"]), i["format"], int(i["virtual-size"]), int(i.get("actual-size", 0))
        )
        for i in infos
    ]
