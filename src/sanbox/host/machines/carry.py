"""A stopped computer's disk carried between hosts (`sanbox move`; disk/transfer.py says how
the file is made and checked). The sending host makes the file in the computer's folder and
streams it; the taking host makes the computer's folder from it, or nothing. The sender's
computer is left as it was: the control plane destroys it once the record names the other host."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator

from ..disk import transfer
from ..disk.transfer import DiskExport, Receiver
from ..errors import HostError
from ..image import Image
from .boot import MachineNotFoundError, Machines

EXPORT = "export.qcow2"


async def export_disk(machines: Machines, computer_id: str, image: Image) -> DiskExport:
    cdir = machines.data_dir.computer(computer_id)
    if not cdir.disk.is_file():
        raise MachineNotFoundError(f"computer {computer_id} has no disk here")
    if machines.attach_vm(computer_id) is not None:
        raise HostError(f"computer {computer_id} is running: a disk moves stopped")
    return await asyncio.to_thread(transfer.export, cdir.disk, image, cdir.root / EXPORT)


async def export_chunks(machines: Machines, computer_id: str) -> AsyncIterator[bytes]:
    path = machines.data_dir.computer(computer_id).root / EXPORT
    if not path.is_file():
        raise HostError(f"computer {computer_id} has no disk export here: export it first")
    with open(path, "rb") as f:
        while data := await asyncio.to_thread(f.read, transfer.CHUNK):
            yield data


async def drop_export(machines: Machines, computer_id: str) -> None:
    (machines.data_dir.computer(computer_id).root / EXPORT).unlink(missing_ok=True)


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
