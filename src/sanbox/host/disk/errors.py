"""Errors of disk clones.

HostError
└── DiskError
    ├── DiskTooSmallError    a requested size below the image's
    └── DiskExistsError      a clone onto an existing disk (it would be lost)
"""

from __future__ import annotations

from ..errors import HostError


class DiskError(HostError):
    code = "disk_error"


class DiskTooSmallError(DiskError):
    code = "disk_too_small"


class DiskExistsError(DiskError):
    code = "disk_exists"
