"""Errors of disk clones.

HostError
└── DiskError
    ├── DiskTooSmallError    a requested size below the image's
    ├── DiskExistsError      a clone onto an existing disk (it would be lost)
    └── DiskDamagedError     a disk carried from another host that is not what was sent
"""

from __future__ import annotations

from ..errors import HostError


class DiskError(HostError):
    code = "disk_error"


class DiskDamagedError(DiskError):
    """A disk carried from another host that is not what was sent (its size, hash or form)."""

    code = "disk_damaged"


class DiskTooSmallError(DiskError):
    code = "disk_too_small"


class DiskExistsError(DiskError):
    code = "disk_exists"
