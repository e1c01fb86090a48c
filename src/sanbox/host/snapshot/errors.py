"""Errors of snapshots.

HostError
└── SnapshotError                a snapshot could not be taken, made into a computer or deleted
    ├── SnapshotNotFoundError    no complete snapshot of that id on this host
    └── SnapshotCorruptError     its files do not match what was recorded (`reason` says how)
"""

from __future__ import annotations

from ..errors import HostError


class SnapshotError(HostError):
    code = "snapshot_failed"


class SnapshotNotFoundError(SnapshotError):
    code = "snapshot_not_found"


class SnapshotCorruptError(SnapshotError):
    code = "snapshot_corrupt"

    def __init__(self, snapshot_id: str, reason: str, detail: str) -> None:
        super().__init__(f"snapshot {snapshot_id} is {reason} and cannot be used: {detail}")
        self.reason = reason
