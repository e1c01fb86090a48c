"""qcow2 overlays with `qemu-img`: a thin copy-on-write file on a read-only base, made in constant
time whatever the base's size and whatever the filesystem (no reflink needed), and what a chain of
them looks like."""

from __future__ import annotations

import json
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import DiskError

DiskFormat = Literal["raw", "qcow2"]
IMG_TOOL = "qemu-img"
TIMEOUT = 60.0


def _run(*args: str) -> str:
    try:
        out = subprocess.run(
            [IMG_TOOL, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
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


def create_overlay(base: Path, dest: Path, size_bytes: int, base_exists: bool = True) -> None:
    """A new qcow2 file at `dest` of `size_bytes` whose unwritten clusters read from `base` (by
    its absolute path, which must never change while anything is backed by it). `base_exists`
    False: `base` is where the backing file is about to be (a live snapshot renames it there)."""
    unsafe = () if base_exists else ("-u",)
    _run(
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        "cluster_size=65536",
        *unsafe,
        "-b",
        str(base if not base_exists else base.resolve()),
        "-F",
        format_of(base),
        str(dest),
        str(size_bytes),
    )


def rebase(path: Path, new_base: Path, same_content: bool = False) -> None:
    """Make `new_base` the backing file of the qcow2 file `path`. Unless `same_content`, the
    clusters in which the old and new backing chains differ are first copied into `path`, so
    what it reads does not change (QEMU reads only clusters allocated above `new_base` when
    `new_base` is in the old chain). `same_content`: only the header changes."""
    unsafe = ("-u",) if same_content else ()
    _run(
        "rebase",
        "-q",
        "-f",
        "qcow2",
        *unsafe,
        "-b",
        str(new_base),
        "-F",
        format_of(new_base),
        str(path),
    )


def convert_to_qcow2(raw: Path, dest: Path) -> None:
    """A standalone qcow2 file at `dest` holding what the raw disk `raw` holds (its holes are
    left unallocated)."""
    _run("convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(dest))


def check(path: Path) -> None:
    """DiskError unless `qemu-img check` finds the qcow2 file (and its metadata) consistent."""
    _run("check", "-q", "-f", "qcow2", str(path))


QCOW2_MAGIC = b"QFI\xfb"
_HEADER = struct.Struct(">4sIQI")  # magic, version, backing_file_offset, backing_file_size


def parse_backing(header: bytes) -> str | None:
    """The backing file name a qcow2 header names (None: no backing file). Pure."""
    if len(header) < _HEADER.size:
        raise DiskError("not a qcow2 file: too short")
    magic, _version, offset, size = _HEADER.unpack_from(header)
    if magic != QCOW2_MAGIC:
        raise DiskError("not a qcow2 file: bad magic")
    if offset == 0 or size == 0:
        return None
    if size > 1023 or offset + size > len(header):
        raise DiskError("qcow2 backing file name out of range")
    return header[offset : offset + size].decode("utf-8", errors="strict")


_SIZE = struct.Struct(">Q")  # the virtual size, after magic, version, backing offset and
_SIZE_AT = 24  # size and cluster_bits (qcow2's header, versions 2 and 3)


def parse_virtual_size(header: bytes) -> int:
    """The size the guest sees, from a qcow2 header. Pure."""
    if len(header) < _SIZE_AT + _SIZE.size or header[:4] != QCOW2_MAGIC:
        raise DiskError("not a qcow2 file: bad magic or too short")
    (size,) = _SIZE.unpack_from(header, _SIZE_AT)
    return int(size)


def virtual_size(path: Path) -> int:
    """The size the guest sees of a qcow2 file, from its header (no qemu-img process: a claim
    asks it on its way to handing a computer out)."""
    with open(path, "rb") as f:
        return parse_virtual_size(f.read(_SIZE_AT + _SIZE.size))


def backing_of(path: Path) -> Path | None:
    """The backing file of a qcow2 file, from its header (no qemu-img process)."""
    with open(path, "rb") as f:
        head = f.read(65536)
    name = parse_backing(head)
    return None if name is None else Path(name)


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
