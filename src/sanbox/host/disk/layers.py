"""Frozen read-only disk layers: what a snapshot's disk is, and what computers' overlays stand on.

A layer is a file `layers/<lyr_id>.qcow2` (or `.raw`: a raw disk frozen as it was) that nothing
writes again, with a MACed manifest beside it (`<lyr_id>.json`: its backing file, its depth and a
keyed BLAKE3 digest of its bytes, checked before a new computer is made on it). A layer's depth is
the number of layers in its chain, itself included; the image at the bottom is not counted. A
computer's disk is its own overlay on a layer (or on the image), so its chain is depth + 1 long,
kept at most `MAX_CHAIN` by flattening a snapshot's layer onto the image when it would be deeper.

What references a layer is read from the files themselves (each qcow2 header names its backing
file), so a layer is kept while a computer's disk, a snapshot or another kept layer stands on it,
and `unreferenced` (pure) decides the rest. Ids are 128 random bits: the folder is not listable
to VM users, and a layer's name is the only way to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import blake3

from ..data.durable import fsync_path
from ..data.layout import DataDir
from . import qcow2
from .clone import clone_file
from .errors import DiskError
from .qcow2 import DiskFormat, format_of

MAX_CHAIN = 8  # a computer's overlay and the layers below it (the image not counted)
PREFIX = "lyr_"


class LayerError(DiskError):
    """A layer that is missing or does not match what was recorded when it was frozen."""

    code = "layer_corrupt"

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"disk layer {reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class LayerInfo:
    id: str
    format: DiskFormat
    backing: str | None  # absolute path of the backing file (a layer or an image); None: raw
    depth: int
    size_bytes: int  # bytes of the file
    digest: str  # `digest_file` of the file
    frozen_at: float
    mac: str = ""


def unreferenced(backing: Mapping[str, str | None], roots: Iterable[str]) -> set[str]:
    """The layers nothing needs: not a root and not under one. `backing`: each layer's id and
    the id of the layer it stands on (None: on an image, or raw). Pure."""
    kept: set[str] = set()
    for root in roots:
        layer: str | None = root
        while layer is not None and layer in backing and layer not in kept:
            kept.add(layer)
            layer = backing[layer]
    return set(backing) - kept


def needs_flatten(depth: int) -> bool:
    """Whether a layer of `depth` is too deep to be a snapshot's disk: a computer made on it
    would have a chain longer than MAX_CHAIN."""
    return depth + 1 > MAX_CHAIN


def _mac(fields: dict[str, object], key: bytes) -> str:
    body = json.dumps({k: v for k, v in fields.items() if k != "mac"}, sort_keys=True)
    return blake3.blake3(body.encode(), key=key).hexdigest()


_CHUNK = 1 << 20
_ZERO = bytes(_CHUNK)
CHUNKED = "c1:"  # the prefix of a digest made by chunks (one without it read every byte)


def digest_file(path: Path, key: bytes) -> str:
    """A keyed BLAKE3 digest of a file's bytes that reads only the data it holds: the file in
    1 MiB chunks, and for each chunk with a byte that is not zero, its index and its BLAKE3.
    A hole and a chunk of zeros count as nothing, so a sparse file and a full copy of it have
    one digest, and an 8 GiB disk with 1 GiB written reads 1 GiB."""
    size = path.stat().st_size
    outer = blake3.blake3(key=key)
    outer.update(size.to_bytes(8, "little"))
    with path.open("rb") as f:
        fd = f.fileno()
        for start, end in _data_ranges(fd, size):
            for offset in range(start, end, _CHUNK):
                chunk = os.pread(fd, min(_CHUNK, size - offset), offset)
                if chunk != _ZERO[: len(chunk)]:
                    outer.update((offset // _CHUNK).to_bytes(8, "little"))
                    outer.update(blake3.blake3(chunk).digest())
    return CHUNKED + outer.hexdigest()


def _data_ranges(fd: int, size: int) -> Iterable[tuple[int, int]]:
    """The file's data extents (SEEK_DATA/SEEK_HOLE), each widened to whole chunks and merged
    with the next where they share one: ranges in order that never read a chunk twice."""
    pos, last = 0, -1
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after pos
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        first = max(start // _CHUNK * _CHUNK, last)
        stop = min(-(-end // _CHUNK) * _CHUNK, size)
        if first < stop:
            yield first, stop
        last = max(last, stop)
        pos = end


def _digest_whole(path: Path, key: bytes) -> str:
    """The digest of layers frozen before `digest_file`: every byte, holes read as zeros."""
    hasher = blake3.blake3(key=key, max_threads=blake3.blake3.AUTO)
    if path.stat().st_size:
        hasher.update_mmap(path)
    return hasher.hexdigest()


def matches(path: Path, digest: str, key: bytes) -> bool:
    """Whether a file's bytes are those a digest was made of (by either scheme)."""
    made = digest_file if digest.startswith(CHUNKED) else _digest_whole
    return made(path, key) == digest


class LayerStore:
    def __init__(self, data_dir: DataDir, key: bytes, group: int | None = None) -> None:
        self.data_dir = data_dir
        self.root = data_dir.layers
        self.key = key
        self.group = group  # VM users' group: they read layers (0640), never write them

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # VM users pass through; nobody lists it

    def new_path(self, fmt: DiskFormat) -> Path:
        return self.root / f"{PREFIX}{secrets.token_hex(16)}.{fmt}"

    def id_of(self, path: Path) -> str | None:
        """The layer id of `path` if it is a layer of this store."""
        if path.parent != self.root or not path.name.startswith(PREFIX):
            return None
        return path.name.split(".", 1)[0]

    def path(self, layer_id: str) -> Path:
        for fmt in ("qcow2", "raw"):
            p = self.root / f"{layer_id}.{fmt}"
            if p.exists():
                return p
        raise LayerError("missing", f"{layer_id} is not on this host")

    def _manifest(self, layer_id: str) -> Path:
        return self.root / f"{layer_id}.json"

    def depth_below(self, disk: Path) -> int:
        """The depth of the layer `disk` stands on (0: on an image, or raw)."""
        if format_of(disk) != "qcow2":
            return 0
        base = qcow2.backing_of(disk)
        lid = None if base is None else self.id_of(base)
        return 0 if lid is None else self.load(lid).depth

    def held(self, path: Path) -> int:
        """Bytes the disk file at `path` and the layers under it hold (their files' lengths),
        down to the image: what a flat copy of it above the image writes at most (a snapshot's
        flattened layer, an export a move carries). OSError, LayerError: a chain it cannot read."""
        held, backing = path.stat().st_size, qcow2.backing_of(path)
        lid = None if backing is None else self.id_of(backing)
        while lid is not None:
            info = self.load(lid)
            held += info.size_bytes
            lid = None if info.backing is None else self.id_of(Path(info.backing))
        return held

    def flat_copy(self, path: Path, size: int) -> int:
        """Bytes a flat copy of the disk at `path` above the image writes at most: what its chain
        holds (`held`), at most its guest's `size`; `size` where the chain cannot be read."""
        with contextlib.suppress(OSError, DiskError):  # (a layer's, or the qcow2 header's)
            return min(self.held(path), size)
        return size

    def record(self, path: Path) -> LayerInfo:
        """Seal a frozen layer file: read-only to VM users, digested, its manifest written
        durably (the file first, then the manifest)."""
        lid = self.id_of(path)
        if lid is None:
            raise DiskError(f"{path} is not in the layer store")
        fmt = format_of(path)
        backing = qcow2.backing_of(path) if fmt == "qcow2" else None
        base_lid = None if backing is None else self.id_of(backing)
        depth = 1 + (self.load(base_lid).depth if base_lid is not None else 0)
        os.chown(path, 0, self.group if self.group is not None else 0)
        os.chmod(path, 0o640 if self.group is not None else 0o600)
        fsync_path(path)
        fields = asdict(
            LayerInfo(
                id=lid,
                format=fmt,
                backing=None if backing is None else str(backing),
                depth=depth,
                size_bytes=path.stat().st_size,
                digest=digest_file(path, self.key),
                frozen_at=time.time(),
            )
        )
        info = LayerInfo(**{**fields, "mac": _mac(fields, self.key)})
        tmp = self._manifest(lid).with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(info), indent=2))
        fsync_path(tmp)
        os.rename(tmp, self._manifest(lid))
        fsync_path(self.root)
        return info

    def load(self, layer_id: str) -> LayerInfo:
        """A layer's manifest, its MAC checked (not its bytes: see `verify`)."""
        try:
            data = json.loads(self._manifest(layer_id).read_text())
        except FileNotFoundError:
            raise LayerError("missing", f"{layer_id} has no manifest") from None
        except (OSError, ValueError) as exc:
            raise LayerError("corrupt", f"{layer_id}: unreadable manifest: {exc}") from exc
        if not isinstance(data, dict) or data.get("mac") != _mac(data, self.key):
            raise LayerError("corrupt", f"{layer_id}: manifest changed, or made on another host")
        try:
            return LayerInfo(**data)
        except TypeError as exc:
            raise LayerError("corrupt", f"{layer_id}: malformed manifest: {exc}") from exc

    def verify(self, layer_id: str) -> list[LayerInfo]:
        """Check a layer and every layer under it against their digests; their infos, top first.
        LayerError(missing | corrupt) with the reason otherwise."""
        chain: list[LayerInfo] = []
        lid: str | None = layer_id
        while lid is not None:
            info = self.load(lid)
            path = self.root / f"{lid}.{info.format}"
            if not path.is_file():
                raise LayerError("missing", f"{path.name} is gone")
            if path.stat().st_size != info.size_bytes or not matches(path, info.digest, self.key):
                raise LayerError("corrupt", f"{path.name} does not match its digest")
            if info.format == "qcow2" and str(qcow2.backing_of(path)) != str(info.backing):
                raise LayerError("corrupt", f"{path.name} names another backing file")
            chain.append(info)
            lid = None if info.backing is None else self.id_of(Path(info.backing))
        return chain

    def flatten(self, info: LayerInfo, image: Path) -> LayerInfo:
        """A new layer with what `info` reads, standing on the image alone (depth 1): a copy of
        it rebased onto the image, which copies in only the clusters its other layers hold."""
        src = self.root / f"{info.id}.{info.format}"
        dest = self.new_path("qcow2")
        tmp = dest.with_name(dest.name + ".tmp")
        try:
            clone_file(src, tmp)
            os.chmod(tmp, 0o600)
            qcow2.rebase(tmp, image)
            fsync_path(tmp)
            os.rename(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            return self.record(dest)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise

    def backing_graph(self) -> dict[str, str | None]:
        """Every layer file and the layer it stands on, read from the files' headers."""
        graph: dict[str, str | None] = {}
        if not self.root.is_dir():
            return graph
        for path in self.root.iterdir():
            if path.suffix not in (".qcow2", ".raw") or not path.name.startswith(PREFIX):
                continue
            lid = self.id_of(path)
            if lid is None:
                continue
            base = None
            if path.suffix == ".qcow2":
                with contextlib.suppress(OSError, DiskError):
                    backing = qcow2.backing_of(path)
                    base = None if backing is None else self.id_of(backing)
            graph[lid] = base
        return graph

    def roots_of_disk(self, disk: Path) -> str | None:
        """The layer a computer's disk is (an overlay kept in the store) or stands on."""
        if self.id_of(disk) is not None:
            return self.id_of(disk)
        if format_of(disk) != "qcow2" or not disk.is_file():
            return None
        try:
            backing = qcow2.backing_of(disk)
        except (OSError, DiskError):
            return None
        return None if backing is None else self.id_of(backing)

    def remove(self, layer_ids: Iterable[str]) -> list[str]:
        """Delete layers (manifest first, so a half-deleted layer is never trusted)."""
        removed = []
        for lid in sorted(layer_ids):
            self._manifest(lid).unlink(missing_ok=True)
            for fmt in ("qcow2", "raw"):
                (self.root / f"{lid}.{fmt}").unlink(missing_ok=True)
            removed.append(lid)
        for stale in self.root.glob("*.tmp") if self.root.is_dir() else []:
            stale.unlink(missing_ok=True)  # a flatten or manifest a crash left half-made
        if removed:
            fsync_path(self.root)
        return removed
