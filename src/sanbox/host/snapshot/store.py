"""Snapshots on disk: `snapshots/<snp_id>/{manifest.json, memory/}`, made in a temporary folder
(`snapshots/.tmp-<snp_id>`) whose files are fsynced, the manifest written last, then renamed into
place. Listing reads only folders with a genuine manifest, so a half-written snapshot is never
seen; a check before use compares the files with the manifest (its layers' digests, its saved
memory's) and names what is wrong.

`Snapshots` also collects disk layers: one lock serialises freezing layers, writing snapshots and
deleting what nothing references (computers' disks, snapshots, the layers under them)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..data.durable import fsync_path
from ..data.layout import DataDir
from ..disk.layers import LayerError, LayerStore, unreferenced
from ..errors import LayoutError
from ..saved import memory
from . import manifest as mf
from .errors import SnapshotCorruptError, SnapshotError, SnapshotNotFoundError
from .manifest import SnapshotManifest

TMP_PREFIX = ".tmp-"


def disk_usage(path: Path) -> int:
    """The bytes `path` (a file, or a folder and everything in it) takes on disk."""
    if not path.is_dir():
        return path.lstat().st_blocks * 512
    return sum(disk_usage(child) for child in path.iterdir())


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


class Snapshots:
    def __init__(self, data_dir: DataDir, key: bytes, layers: LayerStore) -> None:
        self.data_dir = data_dir
        self.root = data_dir.snapshots
        self.key = key
        self.layers = layers
        self.lock = asyncio.Lock()
        self.in_progress: set[str] = set()

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.layers.ensure()

    def tmp_dir(self, snapshot_id: str) -> Path:
        self.data_dir.snapshot(snapshot_id)  # validates the id
        return self.root / f"{TMP_PREFIX}{snapshot_id}"

    def commit(self, tmp: Path, manifest: SnapshotManifest) -> Path:
        """Make `tmp` the snapshot: its files fsynced, the manifest written last, renamed."""
        final = self.data_dir.snapshot(manifest.id)
        if final.exists():
            raise SnapshotError(f"snapshot {manifest.id} exists already")
        _fsync_tree(tmp)
        text = mf.render(manifest, self.key)
        (tmp / f"{mf.MANIFEST}.tmp").write_text(text)
        fsync_path(tmp / f"{mf.MANIFEST}.tmp")
        os.rename(tmp / f"{mf.MANIFEST}.tmp", tmp / mf.MANIFEST)
        fsync_path(tmp)
        os.rename(tmp, final)
        fsync_path(self.root)
        return final

    def load(self, snapshot_id: str) -> SnapshotManifest:
        """The snapshot's manifest, checked (its MAC, not yet its files: see `verify`)."""
        try:
            folder = self.data_dir.snapshot(snapshot_id)
        except LayoutError as exc:
            raise SnapshotNotFoundError(str(exc)) from exc
        try:
            text = (folder / mf.MANIFEST).read_text()
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id} on this host") from None
        except OSError as exc:
            raise SnapshotCorruptError(snapshot_id, "unreadable", str(exc)) from exc
        return mf.parse(text, snapshot_id, self.key)

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.name.startswith("snp_"))

    def complete(self) -> list[SnapshotManifest]:
        """Every complete, genuine snapshot (a damaged one is left out, not listed half)."""
        found = []
        for sid in self.ids():
            with contextlib.suppress(SnapshotError):
                found.append(self.load(sid))
        return found

    def memory_dir(self, snapshot_id: str) -> Path:
        return self.data_dir.snapshot(snapshot_id) / mf.MEMORY_DIR

    def verify(self, snap: SnapshotManifest, compat: dict[str, Any] | None) -> None:
        """Check the snapshot's files against its manifest: its disk layers (every byte, by
        digest) and, with `compat`, its saved memory's manifest and device state (the memory
        itself is checked where it is mapped or copied). SnapshotCorruptError says what is wrong;
        memory.StateError(incompatible) passes through (the disk is still good)."""
        self.verify_disk(snap)
        if snap.memory and compat is not None:
            self.saved_memory(snap, compat)

    def verify_disk(self, snap: SnapshotManifest) -> None:
        """Check the snapshot's disk layers, every byte, by digest (SnapshotCorruptError)."""
        try:
            chain = self.layers.verify(snap.layer)
        except LayerError as exc:
            raise SnapshotCorruptError(snap.id, exc.reason, str(exc)) from exc
        if chain[0].digest != snap.layer_digest:
            raise SnapshotCorruptError(snap.id, "corrupt", "its disk layer was replaced")

    def saved_memory(self, snap: SnapshotManifest, compat: dict[str, Any]) -> memory.SavedState:
        """The snapshot's saved memory, its manifest and device state checked (not the memory
        itself). SnapshotCorruptError says what is wrong; memory.StateError(incompatible)
        passes through (the disk is still good)."""
        try:
            return memory.load(self.memory_dir(snap.id), compat, self.key)
        except memory.StateError as exc:
            if exc.reason == "incompatible":
                raise
            raise SnapshotCorruptError(snap.id, exc.reason, str(exc)) from exc

    def delete(self, snapshot_id: str) -> None:
        """Remove a snapshot: its manifest first (it stops being one), then its files."""
        folder = self.data_dir.snapshot(snapshot_id)
        if not folder.exists():
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id} on this host")
        (folder / mf.MANIFEST).unlink(missing_ok=True)
        fsync_path(folder)
        shutil.rmtree(folder)
        fsync_path(self.root)

    # layers nothing references -------------------------------------------------------------

    def _roots(self) -> set[str]:
        roots: set[str] = set()
        for sid in self.ids():
            with contextlib.suppress(OSError):
                layer = mf.layer_named((self.root / sid / mf.MANIFEST).read_text())
                if layer is not None:
                    roots.add(layer)
        for cid in self.data_dir.computer_ids():
            with contextlib.suppress(LayoutError):
                lid = self.layers.roots_of_disk(self.data_dir.computer(cid).disk)
                if lid is not None:
                    roots.add(lid)
        return roots

    def collect(self) -> list[str]:
        """Delete layers nothing references and snapshot folders left half-made by a crash.
        Call with `lock` held. Returns the layers deleted."""
        for tmp in self.root.glob(f"{TMP_PREFIX}*") if self.root.is_dir() else []:
            if tmp.name[len(TMP_PREFIX) :] not in self.in_progress:
                shutil.rmtree(tmp, ignore_errors=True)
        graph = self.layers.backing_graph()
        return self.layers.remove(unreferenced(graph, self._roots()))

    def layer_chains(self, snapshot_ids: Iterable[str]) -> dict[str, list[str]]:
        """Each snapshot's disk layer and the layers under it, its own first (empty for a
        snapshot that is gone)."""
        graph = self.layers.backing_graph()
        chains: dict[str, list[str]] = {}
        for sid in snapshot_ids:
            try:
                layer = mf.layer_named((self.data_dir.snapshot(sid) / mf.MANIFEST).read_text())
            except (OSError, LayoutError):
                layer = None
            chain: list[str] = []
            while layer is not None and layer not in chain:
                chain.append(layer)
                layer = graph.get(layer)
            chains[sid] = chain
        return chains

    async def discard(self, snapshot_id: str) -> None:
        """Remove a snapshot and the layers it alone needed (the lock taken)."""
        async with self.lock:
            await asyncio.to_thread(self.delete, snapshot_id)
            await asyncio.to_thread(self.collect)

    async def collect_unused(self) -> list[str]:
        """`collect`, the lock taken: the layers nothing references, deleted."""
        async with self.lock:
            return await asyncio.to_thread(self.collect)

    def delete_many(self, snapshot_ids: Iterable[str]) -> int:
        """Remove snapshots (one already gone is skipped) and the layers only they needed;
        returns the bytes this freed on disk. Call with `lock` held."""
        freed = 0
        for sid in snapshot_ids:
            folder = self.data_dir.snapshot(sid)
            if folder.exists():
                freed += disk_usage(folder)
                self.delete(sid)
        root = self.layers.root
        before = {p.name: disk_usage(p) for p in root.iterdir()} if root.is_dir() else {}
        self.collect()
        return freed + sum(size for name, size in before.items() if not (root / name).exists())
