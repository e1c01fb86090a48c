"""Snapshots and forks on this host: a computer's disk frozen as a read-only layer (with its
memory when asked), new computers made from it, forks with new identities, and the collection of
layers nothing references. `HostRuntime.snapshot/create_from_snapshot/fork/delete_snapshot/
gc_layers` call into here."""

from .errors import SnapshotCorruptError, SnapshotError, SnapshotNotFoundError
from .manifest import SnapshotManifest
from .store import Snapshots

__all__ = [
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotManifest",
    "SnapshotNotFoundError",
    "Snapshots",
]
