"""A running or stopped computer's disk moved onto a new overlay at one instant, its current
disk frozen as a read-only layer in the layer store (a snapshot's first step): the files first
(`prepare_switch`: the layer under a second name where the disk lies outside the store, a new
overlay on it), then the computer's disk link (`point`, atomic) and the running VM
(`VmHandle.switch_disk`); undone in that order's reverse on failure."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from ..data.durable import fsync_path
from ..data.layout import ComputerDir
from ..disk import qcow2
from ..drivers import SwitchUnknownError, VmHandle
from ..snapshot.store import Snapshots
from .boot import Machines


@dataclass
class Switch:
    """A disk freeze in files: `layer` (the frozen disk, in the layer store), `overlay` (the
    computer's new disk on it), and how to undo it."""

    layer: Path
    overlay: Path
    linked: bool  # `layer` is a new name (a hard link) of a disk file outside the store
    old_target: str | None  # where the computer's disk link pointed before

    def undo(self, cdir: ComputerDir) -> None:
        point(cdir, self.old_target)
        self.overlay.unlink(missing_ok=True)
        if self.linked:
            self.layer.unlink(missing_ok=True)


def point(cdir: ComputerDir, target: str | None) -> None:
    """Make the computer's disk link name `target` (None: no link), atomically."""
    if target is None:
        cdir.disk_link.unlink(missing_ok=True)
        return
    tmp = cdir.root / "disk.link-tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, cdir.disk_link)


def prepare_switch(snaps: Snapshots, m: Machines, cdir: ComputerDir) -> Switch:
    """Freeze the disk file as a layer where it lies (a disk in the store already) or under a
    second name in the store (a hard link: the path QEMU opened stays valid, no data moves), and
    make a new overlay on it; the computer's disk link still names the old disk (`_point`).
    Nothing is renamed under a running QEMU: it reopens images by name when it reactivates them
    after saving the device state."""
    disk = cdir.disk
    size = m.disks.size(disk)
    linked = snaps.layers.id_of(disk) is None
    layer = snaps.layers.new_path(qcow2.format_of(disk)) if linked else disk
    if linked:
        os.link(disk, layer)
    old = os.readlink(cdir.disk_link) if cdir.disk_link.is_symlink() else None
    overlay = snaps.layers.new_path("qcow2")
    switch = Switch(layer, overlay, linked, old)
    try:
        qcow2.create_overlay(layer, overlay, size)
        st = disk.stat()
        os.chown(overlay, st.st_uid, st.st_gid)
        os.chmod(overlay, 0o600)
    except BaseException:
        switch.undo(cdir)
        raise
    return switch


def switch_files(snaps: Snapshots, m: Machines, cdir: ComputerDir) -> Switch:
    """`prepare_switch`, and the computer's disk is the new overlay from now on."""
    switch = prepare_switch(snaps, m, cdir)
    try:
        point(cdir, str(switch.overlay))
    except BaseException:
        switch.undo(cdir)
        raise
    return switch


async def freeze_disk(
    snaps: Snapshots, m: Machines, cdir: ComputerDir, vm: VmHandle | None
) -> Path:
    switch = await asyncio.to_thread(switch_files, snaps, m, cdir)
    if vm is not None:
        try:
            await vm.switch_disk(switch.overlay)
        except SwitchUnknownError:
            # the guest may write to either file: neither is taken away. The VM ends, so nothing
            # writes to what is now a layer, and the computer's disk (the overlay on that layer)
            # holds all it wrote whichever it was
            await vm.kill()
            raise
        except BaseException:
            await asyncio.to_thread(switch.undo, cdir)
            raise
    for d in (cdir.root, snaps.layers.root):
        await asyncio.to_thread(fsync_path, d)
    return switch.layer
