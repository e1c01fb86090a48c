"""What is carried between hosts: a stopped computer's disk (`sanbox move`; disk/transfer.py)
and a snapshot with its memory (`sanbox snapshot move`; snapshot/transfer.py). The sending host
makes the files in `<data dir>/exports/<id>/` and streams them; the taking host makes the
computer's folder or the snapshot from them, checked, or nothing. The sender's copy is left as
it was: the control plane removes it once its record names the other host. What an export
writes (`export_bytes`: a copy of the disk with the layers under it folded in; a snapshot's
memory files are linked, not copied) is admitted by the sending host agent before it is made
(`fleet/link/room.py` `HostRoom.exported`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

from ..data.layout import DataDir
from ..data.space import virtual_size
from ..disk import transfer
from ..disk.transfer import DiskExport, Receiver
from ..errors import HostError
from ..image import Image
from ..snapshot import Snapshots
from ..snapshot import transfer as snapshot_transfer
from ..snapshot.manifest import SnapshotManifest
from ..snapshot.transfer import SnapshotExport, Taker
from .boot import MachineNotFoundError, Machines

EXPORTS = "exports"
DISK = "disk.qcow2"
_ITEM = re.compile(r"(snp_)?[a-z0-9][a-z0-9_-]{1,62}")
NAMES = frozenset(snapshot_transfer.FILES)  # what an export may hold (a disk's is `DISK`)


def export_bytes(snapshots: Snapshots, item_id: str) -> int:
    """Bytes an export of computer `item_id`'s disk or of snapshot `item_id` writes at most: what
    the disk (a snapshot's: its layer) and the layers under it hold above the image, at most its
    guest's size; 0 when there is none here (the export itself says so). A chain it cannot read
    counts its guest's size."""
    data_dir = snapshots.data_dir
    try:
        if item_id.startswith("snp_"):
            snap = snapshots.load(item_id)
            disk, size = snapshots.layers.path(snap.layer), snap.disk_bytes
        else:
            disk = data_dir.computer(item_id).disk
            if not disk.is_file():
                return 0
            size = virtual_size(disk)
    except (OSError, HostError):
        return 0
    return snapshots.layers.flat_copy(disk, size)


def export_dir(data_dir: DataDir, item_id: str) -> Path:
    if not _ITEM.fullmatch(item_id):
        raise HostError(f"invalid id {item_id!r}")
    return data_dir.root / EXPORTS / item_id


async def export_disk(machines: Machines, computer_id: str, image: Image) -> DiskExport:
    cdir = machines.data_dir.computer(computer_id)
    if not cdir.disk.is_file():
        raise MachineNotFoundError(f"computer {computer_id} has no disk here")
    if machines.attach_vm(computer_id) is not None:
        raise HostError(f"computer {computer_id} is running: a disk moves stopped")
    dest = _fresh(machines.data_dir, computer_id)
    return await asyncio.to_thread(transfer.export, cdir.disk, image, dest / DISK)


async def export_snapshot(
    data_dir: DataDir, snapshots: Snapshots, snapshot_id: str, image: Image
) -> SnapshotExport:
    dest = _fresh(data_dir, snapshot_id)
    try:
        return await asyncio.to_thread(
            snapshot_transfer.export, snapshots, snapshot_id, image, dest
        )
    except BaseException:
        await drop_export(data_dir, snapshot_id)
        raise


async def export_chunks(data_dir: DataDir, item_id: str, name: str) -> AsyncGenerator[bytes, None]:
    path = export_dir(data_dir, item_id) / name
    if name not in NAMES or not path.is_file():
        raise HostError(f"no {name} of {item_id} exported here: export it first")
    with open(path, "rb") as f:
        while data := await asyncio.to_thread(f.read, transfer.CHUNK):
            yield data


async def drop_export(data_dir: DataDir, item_id: str) -> None:
    await asyncio.to_thread(shutil.rmtree, export_dir(data_dir, item_id), True)


async def drop_exports(data_dir: DataDir) -> None:
    await asyncio.to_thread(shutil.rmtree, data_dir.root / EXPORTS, True)


async def import_disk(
    machines: Machines,
    computer_id: str,
    export: DiskExport,
    image: Image | None,
    chunks: AsyncIterator[bytes],
) -> None:
    """The computer's folder made here with the disk `chunks` carry, checked; or nothing."""
    cdir = machines.data_dir.computer(computer_id)
    if cdir.root.exists():
        raise HostError(f"computer folder {cdir.root} already exists here")
    cdir.root.mkdir(parents=True)
    receiver: Receiver | None = None
    try:
        receiver = Receiver(export, cdir.overlay_disk)
        async for data in chunks:
            await asyncio.to_thread(receiver.write, data)
        await asyncio.to_thread(receiver.finish, image)
    except BaseException:
        if receiver is not None:
            receiver.close()
        with contextlib.suppress(OSError):
            await asyncio.to_thread(shutil.rmtree, cdir.root)
        raise


async def import_snapshot(
    snapshots: Snapshots,
    snapshot_id: str,
    export: SnapshotExport,
    image: Image,
    chunks: AsyncIterator[bytes],
) -> SnapshotManifest:
    """Snapshot `snapshot_id` made here from the files `chunks` carry (in order), checked and
    sealed under this host's key; or nothing."""
    if snapshots.data_dir.snapshot(snapshot_id).exists():
        raise HostError(f"snapshot {snapshot_id} is on this host already")
    if export.snapshot.get("id") != snapshot_id:  # the sender's word is not the name it is kept by
        raise HostError(f"the files carried are of another snapshot than {snapshot_id}")
    tmp = snapshots.tmp_dir(snapshot_id)
    shutil.rmtree(tmp, ignore_errors=True)
    snapshots.in_progress.add(snapshot_id)  # a collect leaves its folder be
    taker: Taker | None = None
    try:
        taker = Taker(export, tmp)
        async for data in chunks:
            await asyncio.to_thread(taker.write, data)
        async with snapshots.lock:
            return await asyncio.to_thread(taker.finish, snapshots, image)
    finally:
        snapshots.in_progress.discard(snapshot_id)
        if taker is not None:
            taker.close()
        await asyncio.to_thread(shutil.rmtree, tmp, True)  # renamed into place, or to go


def _fresh(data_dir: DataDir, item_id: str) -> Path:
    dest = export_dir(data_dir, item_id)
    shutil.rmtree(dest, ignore_errors=True)  # an export a dead caller left
    dest.mkdir(parents=True, mode=0o700)
    return dest
