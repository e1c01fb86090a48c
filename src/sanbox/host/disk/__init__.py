"""Disks: computers' root disks as qcow2 overlays on (or reflink clones of) images."""

from . import qcow2
from .clone import CloneMethod, can_reflink, clone_file
from .disks import GIB, Disk, DiskManager
from .errors import DiskError, DiskExistsError, DiskTooSmallError
from .qcow2 import DiskFormat, format_of

__all__ = [
    "GIB",
    "CloneMethod",
    "Disk",
    "DiskFormat",
    "DiskError",
    "DiskExistsError",
    "DiskManager",
    "DiskTooSmallError",
    "can_reflink",
    "clone_file",
    "format_of",
    "qcow2",
]
