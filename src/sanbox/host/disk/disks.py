"""A computer's root disk: a clone of its image, grown to the size asked for, deleted with it.
Every path must lie inside the data dir."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..layout import DataDir
from .clone import CloneMethod, clone_file
from .errors import DiskError, DiskExistsError, DiskTooSmallError

GIB = 1024**3


@dataclass(frozen=True)
class Disk:
    path: Path
    size_bytes: int
    method: CloneMethod


class DiskManager:
    def __init__(self, data_dir: DataDir) -> None:
        self.data_dir = data_dir

    def create(self, image: Path, dest: Path, size_bytes: int | None = None) -> Disk:
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

    def grow(self, disk: Path, size_bytes: int) -> None:
        """Grow the disk file (the guest grows its filesystem at boot). Never shrinks."""
        disk = self.data_dir.require_inside(disk)
        current = disk.stat().st_size
        if size_bytes < current:
            raise DiskTooSmallError(
                f"{disk.name} is {current / GIB:.1f} GiB: disks only grow, not shrink"
            )
        if size_bytes > current:
            os.truncate(disk, size_bytes)

    def delete(self, disk: Path) -> None:
        self.data_dir.require_inside(disk).unlink(missing_ok=True)
