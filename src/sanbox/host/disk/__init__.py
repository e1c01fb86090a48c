"""Disks: computers' root disks as reflink (or sparse) clones of images."""

from .clone import CloneMethod, can_reflink, clone_file
from .disks import GIB, Disk, DiskManager
from .errors import DiskError, DiskExistsError, DiskTooSmallError

__all__ = [
    "GIB",
    "CloneMethod",
    "Disk",
    "DiskError",
    "DiskExistsError",
    "DiskManager",
    "DiskTooSmallError",
    "can_reflink",
    "clone_file",
]
