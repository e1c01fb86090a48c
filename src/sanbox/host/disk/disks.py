"""A computer's root disk: a copy-on-write clone of its image, grown to the size asked for,
deleted with it. Where the data filesystem can reflink, a raw reflink clone (`disk.raw`, ~3 ms);
elsewhere a qcow2 overlay backed by the image (`disk.qcow2`, ~16 ms): either way the cost does not
grow with the image, and nothing depends on the filesystem. Every path must lie inside the data
dir."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..data.layout import ComputerDir, DataDir
from . import qcow2
from .clone import CloneMethod, can_reflink, clone_file
from .errors import DiskError, DiskExistsError, DiskTooSmallError
from .qcow2 import DiskFormat, format_of

GIB = 1024**3


@dataclass(frozen=True)
class Disk:
    path: Path
    size_bytes: int
    method: CloneMethod | Literal["overlay"]

    @property
    def format(self) -> DiskFormat:
        return format_of(self.path)


class DiskManager:
    def __init__(self, data_dir: DataDir) -> None:
        self.data_dir = data_dir
        self._reflink: bool | None = None

    def reflink(self) -> bool:
        """Whether the data filesystem reflinks (probed once)."""
        if self._reflink is None:
            self._reflink = can_reflink(self.data_dir.computers)
        return self._reflink

    def create(self, image: Path, cdir: ComputerDir, size_bytes: int | None = None) -> Disk:
        """A disk for the computer in `cdir` from `image`, of `size_bytes` (default: the
        image's size): a reflink clone where the filesystem has it, else a qcow2 overlay."""
        if self.reflink():
            return self._clone(image, cdir.raw_disk, size_bytes)
        return self._overlay(image, cdir.overlay_disk, size_bytes)

    def _overlay(self, image: Path, dest: Path, size_bytes: int | None) -> Disk:
        dest = self.data_dir.require_inside(dest)
        size = self._size(image, size_bytes)
        if dest.exists():
            raise DiskExistsError(f"{dest} already exists: delete the computer first")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            qcow2.create_overlay(image, dest, size)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        return Disk(dest, size, "overlay")

    def _size(self, image: Path, size_bytes: int | None) -> int:
        image_size = image.stat().st_size
        size = image_size if size_bytes is None else size_bytes
        if size < image_size:
            raise DiskTooSmallError(
                f"a disk of {size / GIB:.1f} GiB is smaller than the image "
                f"({image_size / GIB:.1f} GiB): ask for at least {-(-image_size // GIB)} GiB"
            )
        return size

    def _clone(self, image: Path, dest: Path, size_bytes: int | None = None) -> Disk:
        """Clone `image` to `dest` and grow it to `size_bytes` (default: the image's size)."""
        dest = self.data_dir.require_inside(dest)
        image_size = image.stat().st_size
        size = image_size if size_bytes is None else size_bytes
        if size < image_size:
            raise DiskTooSmallError(
                f"a disk of {size / GIB:.1f} GiB is smaller than the image "
                f"({image_size / GIB:.1f} GiB): ask for at least {-(-image_size // GIB)} GiB"
            )
        if dest.exists():
            raise DiskExistsError(f"{dest} already exists: delete the computer first")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            method = clone_file(image, dest)
        except OSError as exc:
            raise DiskError(f"cannot clone {image} to {dest}: {exc.strerror}") from exc
        try:
            self.grow(dest, size)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        return Disk(dest, size, method)

    def size(self, disk: Path) -> int:
        """The size the guest sees."""
        if format_of(disk) == "qcow2":
            return qcow2.virtual_size(disk)
        return disk.stat().st_size

    def grow(self, disk: Path, size_bytes: int) -> None:
        """Grow the disk (the guest grows its filesystem at boot). Never shrinks."""
        disk = self.data_dir.require_inside(disk)
        current = self.size(disk)
        if size_bytes < current:
            raise DiskTooSmallError(
                f"{disk.name} is {current / GIB:.1f} GiB: disks only grow, not shrink"
            )
        if size_bytes > current and format_of(disk) == "qcow2":
            qcow2.resize(disk, size_bytes)
        elif size_bytes > current:
            os.truncate(disk, size_bytes)

    def delete(self, disk: Path) -> None:
        self.data_dir.require_inside(disk).unlink(missing_ok=True)
