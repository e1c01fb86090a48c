"""A stopped computer's disk carried to another host (`sanbox move`), as one qcow2 file.

On the host that has it (`export`): a copy of the disk's top overlay, with every layer between
it and its image's rootfs folded in (`qemu-img rebase` onto the rootfs copies the clusters the
layers hold), so the file holds exactly what the computer wrote, backed by its build's rootfs
(`backed`); a raw disk (a reflink clone) is converted to a standalone qcow2. Its size and
SHA-256 go with it.

On the host that takes it (`Receiver`): the bytes are written to a file of the computer's folder
while hashed, never past the size announced; then checked before anything may boot from it:
the same size and SHA-256, a qcow2 header without an external data file, the rootfs of the same
build (and size) here to back it (set by `qemu-img rebase -u`: the build's bytes are the same on
every host that holds it), and `qemu-img check` clean. Anything that fails leaves nothing."""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..image import Image
from . import qcow2
from .clone import sparse_copy_path
from .errors import DiskDamagedError

CHUNK = 1 << 20
_INCOMPATIBLE_AT = 72  # qcow2 v3: the incompatible feature bits
_EXTERNAL_DATA = 1 << 2  # the guest's data in another file, named in the header: never


@dataclass(frozen=True)
class DiskExport:
    size: int  # bytes of the file carried
    sha256: str
    backed: bool  # a qcow2 overlay over its build's rootfs (else a standalone qcow2)
    build_id: str
    rootfs_size: int
    virtual_size: int

    def out(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> DiskExport:
        return cls(
            size=int(data["size"]),
            sha256=str(data["sha256"]),
            backed=bool(data["backed"]),
            build_id=str(data["build_id"]),
            rootfs_size=int(data["rootfs_size"]),
            virtual_size=int(data["virtual_size"]),
        )


def export(disk: Path, image: Image, dest: Path) -> DiskExport:
    """The file at `dest` that carries `disk` (of a stopped computer made from `image`)."""
    dest.unlink(missing_ok=True)
    try:
        if qcow2.format_of(disk) == "raw":
            qcow2.convert_to_qcow2(disk, dest)
            backed = False
        else:
            sparse_copy_path(disk, dest)
            base = qcow2.backing_of(dest)
            backed = base is not None
            if base is not None and base.resolve() != image.rootfs.resolve():
                qcow2.rebase(dest, image.rootfs)  # the layers between folded in
        return DiskExport(
            size=dest.stat().st_size,
            sha256=_sha256(dest),
            backed=backed,
            build_id=image.build_id,
            rootfs_size=image.rootfs.stat().st_size,
            virtual_size=qcow2.virtual_size(dest),
        )
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while data := f.read(CHUNK):
            yield data


class Receiver:
    """Takes the bytes of a `DiskExport` into `dest` (which must not exist)."""

    def __init__(self, export: DiskExport, dest: Path) -> None:
        self.export, self.dest = export, dest
        self._hash = hashlib.sha256()
        self._written = 0
        self._fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def write(self, data: bytes) -> None:
        if self._written + len(data) > self.export.size:
            raise DiskDamagedError(
                f"the disk sent is longer than the {self.export.size} bytes announced"
            )
        self._hash.update(data)
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._written += len(data)

    def finish(self, image: Image | None) -> None:
        """Check what came and make it the computer's disk (backed by `image`'s rootfs)."""
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        e = self.export
        if self._written != e.size or self._hash.hexdigest() != e.sha256:
            raise DiskDamagedError(
                f"the disk arrived damaged: {self._written} of {e.size} bytes, "
                "its SHA-256 differs from the sender's: nothing was kept; move it again"
            )
        with open(self.dest, "rb") as f:
            head = f.read(4096)
        if qcow2.parse_virtual_size(head) != e.virtual_size or external_data(head):
            raise DiskDamagedError("the disk sent is not a plain qcow2 file of the size announced")
        if e.backed:
            if image is None or image.build_id != e.build_id:
                raise DiskDamagedError(
                    f"this host does not hold build {e.build_id} to back the disk"
                )
            if image.rootfs.stat().st_size != e.rootfs_size:
                raise DiskDamagedError(f"build {e.build_id} here differs from the sender's")
            qcow2.rebase(self.dest, image.rootfs, same_content=True)
        elif qcow2.parse_backing(head) is not None:
            raise DiskDamagedError(
                "a standalone disk was announced, but the file names a backing file"
            )
        qcow2.check(self.dest)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def external_data(head: bytes) -> bool:
    (version,) = struct.unpack_from(">I", head, 4)
    if version < 3:
        return False
    (bits,) = struct.unpack_from(">Q", head, _INCOMPATIBLE_AT)
    return bool(bits & _EXTERNAL_DATA)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    for data in chunks(path):
        h.update(data)
    return h.hexdigest()
