"""A snapshot's manifest: what it is made of (its disk's top layer, its saved memory), MACed with
the host's key. Written last, so a snapshot folder without a genuine manifest is not a snapshot.
Pure: the text in, the record or the reason out."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import blake3

from .errors import SnapshotCorruptError

MANIFEST = "manifest.json"
MEMORY_DIR = "memory"  # memory.py's saved state (vmstate, memory, its own MACed manifest)


@dataclass(frozen=True)
class SnapshotManifest:
    id: str
    computer_id: str  # the computer it was taken from
    layer: str  # the disk's top layer (layers/<id>.*)
    layer_digest: str  # that layer's digest when the snapshot was taken
    disk_bytes: int  # the disk's size as the guest sees it
    memory: bool  # whether memory/ holds the guest's RAM and devices
    image: str  # the image build the disk stands on
    vcpus: int
    memory_mib: int
    size_bytes: int  # what the snapshot holds of its own: its layer and its memory
    paused_seconds: float  # how long the computer's vCPUs were stopped for it
    created_at: float
    mac: str = ""


def mac_of(fields: dict[str, Any], key: bytes) -> str:
    body = json.dumps({k: v for k, v in fields.items() if k != "mac"}, sort_keys=True)
    return blake3.blake3(body.encode(), key=key).hexdigest()


def render(manifest: SnapshotManifest, key: bytes) -> str:
    fields = asdict(manifest)
    return json.dumps({**fields, "mac": mac_of(fields, key)}, indent=2)


def parse(text: str, snapshot_id: str, key: bytes) -> SnapshotManifest:
    """The manifest, if genuine and of `snapshot_id`; SnapshotCorruptError otherwise."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SnapshotCorruptError(snapshot_id, "corrupt", f"unreadable manifest: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("mac"), str):
        raise SnapshotCorruptError(snapshot_id, "corrupt", "the manifest has no MAC")
    if data["mac"] != mac_of(data, key):
        raise SnapshotCorruptError(
            snapshot_id, "corrupt", "the manifest was changed, or made on another host"
        )
    try:
        manifest = SnapshotManifest(**data)
    except TypeError as exc:
        raise SnapshotCorruptError(snapshot_id, "corrupt", f"malformed manifest: {exc}") from exc
    if manifest.id != snapshot_id:
        raise SnapshotCorruptError(snapshot_id, "corrupt", f"the manifest is {manifest.id}'s")
    return manifest


def layer_named(text: str) -> str | None:
    """The layer a manifest names, genuine or not (so GC never deletes what a damaged snapshot
    may still need). Pure."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    layer = data.get("layer") if isinstance(data, dict) else None
    return layer if isinstance(layer, str) else None
