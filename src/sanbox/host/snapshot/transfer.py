"""A snapshot carried to another host of its region (`sanbox snapshot move`), its memory too.

Saved memory and layers are MACed with each host's own key (derived from its secret key), and
that key never leaves its host. A snapshot crosses so:

- the host that has it checks it as a restore would (every layer's digest, the memory manifest's
  MAC and every memory chunk), then makes the files that carry it: its disk as one qcow2 file
  over the build's rootfs (its layers folded in, as a moving disk is: disk/transfer.py), the
  device state and the RAM file as they are; each with its size and SHA-256;
- the bytes stream through the API node over mutual TLS;
- the host that takes them writes them into a new snapshot folder while hashing them (never past
  the sizes announced), checks each SHA-256, the disk's qcow2 header and its own copy of the
  same build under it, then seals them under its own key: the disk becomes a layer of its store
  (digested), the memory's chunks are digested anew and its manifest MACed, and the snapshot's
  manifest is written last. A snapshot that is not whole is never seen there.

So what a host trusts is what it checked itself: the sender's MACs before sending, the hashes
of what crossed, then its own MACs over the same bytes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..disk import qcow2
from ..disk.clone import sparse_copy_path
from ..disk.errors import DiskDamagedError
from ..disk.layers import LayerStore
from ..disk.transfer import CHUNK, external_data
from ..image import Image
from ..saved import mapped_memory, memory
from .manifest import MEMORY_DIR, SnapshotManifest
from .store import Snapshots

DISK = "disk.qcow2"
FILES = (DISK, memory.VMSTATE, memory.MEMORY)  # in the order they are carried
KEPT = (
    *("id", "computer_id", "disk_bytes", "memory", "image", "vcpus", "memory_mib"),
    *("size_bytes", "paused_seconds", "created_at"),
)
_ZEROS = bytes(CHUNK)


@dataclass(frozen=True)
class SnapshotExport:
    snapshot: dict[str, Any]  # the manifest's fields that cross (not its layer, digests or MAC)
    saved: dict[str, Any] | None  # the saved memory's manifest fields that cross, if any
    files: list[dict[str, Any]] = field(default_factory=list)  # name, size, sha256; in order
    build_id: str = ""
    rootfs_size: int = 0
    backed: bool = True  # its disk stands on the build's rootfs (else a standalone qcow2)

    def out(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> SnapshotExport:
        files = [
            {"name": str(f["name"]), "size": int(f["size"]), "sha256": str(f["sha256"])}
            for f in data["files"]
        ]
        if [f["name"] for f in files] not in ([DISK], list(FILES)):
            raise ValueError("a snapshot carries its disk, or its disk, device state and memory")
        saved = data.get("saved")
        return cls(
            snapshot={k: data["snapshot"][k] for k in KEPT},
            saved=None if saved is None else dict(saved),
            files=files,
            build_id=str(data["build_id"]),
            rootfs_size=int(data["rootfs_size"]),
            backed=bool(data["backed"]),
        )

    @property
    def size(self) -> int:
        return sum(int(f["size"]) for f in self.files)


def export(snapshots: Snapshots, snapshot_id: str, image: Image, dest: Path) -> SnapshotExport:
    """The files that carry snapshot `snapshot_id` (made from `image`), in folder `dest`."""
    snap = snapshots.load(snapshot_id)
    snapshots.verify(snap, None)  # its layers, every byte
    saved: memory.SavedState | None = None
    state = snapshots.memory_dir(snapshot_id)
    if snap.memory:
        saved = memory.load(state, {}, snapshots.key)  # its MAC and device state's checksum
        mapped_memory.verify_memory(state, saved, snapshots.key)  # every chunk
    dest.mkdir(parents=True, exist_ok=True)
    disk, top = dest / DISK, snapshots.layers.path(snap.layer)
    if qcow2.format_of(top) == "raw":
        qcow2.convert_to_qcow2(top, disk)
    else:
        sparse_copy_path(top, disk)
        if qcow2.backing_of(disk) is not None:
            qcow2.rebase(disk, image.rootfs)  # the layers under it folded in
    names = [DISK]
    if saved is not None:
        for name in (memory.VMSTATE, memory.MEMORY):
            os.link(state / name, dest / name)  # read only: no copy
            names.append(name)
    files = [_file(dest / n) for n in names]
    crossing = None
    if saved is not None:
        crossing = {k: v for k, v in asdict(saved).items() if k not in ("memory_chunks", "mac")}
    return SnapshotExport(
        snapshot={k: getattr(snap, k) for k in KEPT},
        saved=crossing,
        files=files,
        build_id=image.build_id,
        rootfs_size=image.rootfs.stat().st_size,
        backed=qcow2.backing_of(disk) is not None,
    )


class Taker:
    """Takes the bytes of a `SnapshotExport` into a new snapshot folder `tmp` (which it makes)."""

    def __init__(self, export: SnapshotExport, tmp: Path) -> None:
        self.export, self.tmp = export, tmp
        tmp.mkdir(parents=True)
        (tmp / MEMORY_DIR).mkdir()
        self._index, self._fd = 0, -1
        self._open()

    def _path(self, name: str) -> Path:
        return self.tmp / (name if name == DISK else f"{MEMORY_DIR}/{name}")

    def _open(self) -> None:
        self._written, self._hash = 0, hashlib.sha256()
        if self._index < len(self.export.files):
            name = self.export.files[self._index]["name"]
            self._fd = os.open(self._path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            if int(self.export.files[self._index]["size"]) == 0:
                self._end_file()

    def _end_file(self) -> None:
        f = self.export.files[self._index]
        fd, self._fd = self._fd, -1
        os.fsync(fd)
        os.close(fd)
        if self._hash.hexdigest() != f["sha256"]:
            raise DiskDamagedError(
                f"the snapshot's {f['name']} arrived damaged (its SHA-256 differs from the "
                "sender's): nothing was kept; move it again"
            )
        self._index += 1
        self._open()

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._index >= len(self.export.files):
                raise DiskDamagedError("more bytes came than the snapshot's files announced")
            room = int(self.export.files[self._index]["size"]) - self._written
            piece, view = view[:room], view[room:]
            self._hash.update(piece)
            at = self._written
            self._written += len(piece)
            if len(piece) <= CHUNK and piece == _ZEROS[: len(piece)]:
                os.ftruncate(self._fd, self._written)  # a hole, as the sender's memory has
            else:
                while piece:
                    n = os.pwrite(self._fd, piece, at)
                    piece, at = piece[n:], at + n
            if self._written == int(self.export.files[self._index]["size"]):  # zeros or not
                self._end_file()

    def finish(self, snapshots: Snapshots, image: Image) -> SnapshotManifest:
        """Check what came, seal it under this host's key and commit the snapshot (call with
        the snapshots' lock held: its new layer is unreferenced until the manifest is there)."""
        e = self.export
        if self._index < len(e.files):
            raise DiskDamagedError("the snapshot's files arrived short: nothing was kept")
        if image.build_id != e.build_id or image.rootfs.stat().st_size != e.rootfs_size:
            raise DiskDamagedError(f"this host does not hold build {e.build_id} under it")
        disk = self.tmp / DISK
        with open(disk, "rb") as f:
            head = f.read(4096)
        virtual = int(e.snapshot["disk_bytes"])
        if qcow2.parse_virtual_size(head) != virtual or external_data(head):
            raise DiskDamagedError("the snapshot's disk is not a plain qcow2 file of its size")
        if e.backed:
            qcow2.rebase(disk, image.rootfs, same_content=True)
        elif qcow2.parse_backing(head) is not None:
            raise DiskDamagedError("a standalone disk was announced; the file names a backing")
        qcow2.check(disk)
        layer = _sealed(snapshots.layers, disk)
        if e.saved is not None:
            memory.adopt(self.tmp / MEMORY_DIR, e.saved, snapshots.key)
        manifest = SnapshotManifest(**e.snapshot, layer=layer.id, layer_digest=layer.digest)
        snapshots.commit(self.tmp, manifest)
        return manifest

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _sealed(layers: LayerStore, disk: Path) -> Any:
    dest = layers.new_path("qcow2")
    os.rename(disk, dest)
    try:
        return layers.record(dest)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def _file(path: Path) -> dict[str, Any]:
    return {"name": path.name, "size": path.stat().st_size, "sha256": _sha256(path)}


def chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while data := f.read(CHUNK):
            yield data


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    for data in chunks(path):
        h.update(data)
    return h.hexdigest()
