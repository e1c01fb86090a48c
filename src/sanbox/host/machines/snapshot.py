"""Taking a snapshot of a computer, running or not, with its memory or its disk alone.

The disk: the computer's current disk file is frozen as a read-only layer (renamed into the layer
store; a raw disk too, so raw computers move onto overlays here, nothing copied) and the computer
continues on a new overlay backed by it. A running VM is switched to the new overlay at one
instant (`VmHandle.switch_disk`), its root filesystem frozen through the agent around it (or, if
the agent cannot, its vCPUs stopped alone). With memory, where the driver can
(`live_memory_save`) and SANBOX_SNAPSHOT lets it (`saves_live`: by default, but for a VM resumed
from its own saved memory), the RAM is saved while the guest runs (pre-copy) and the vCPUs stop only
for the last pages written since, the disk switching at that instant (its overlay made before);
the RAM is then taken out of the stream (memory.py's format). Otherwise, and for a fork (whose
copies wait for the whole save either way), the vCPUs stop, the disk switches and the device
state and RAM file are saved at that same instant, then the VM runs on. For a VM resumed from
its own saved memory, what is saved at that instant is the pages its guest wrote since
(`save_state_in_place` into a new memory file); the rest is its mapped file's, copied beside
them once the VM runs on (nobody writes that file meanwhile). A paused computer's saved state is
copied as it is.

A snapshot whose layer would make chains too deep gets a flattened copy of it instead; a running
computer whose own chain grew too deep streams its layers into its overlay (`stream_disk`).
Whatever fails, the computer keeps running on a disk that reads as before, and no snapshot is
listed: its folder is temporary until the manifest is in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

from ..agent import AgentError
from ..data.durable import fsync_path
from ..data.layout import ComputerDir
from ..data.space import virtual_size
from ..disk import qcow2
from ..disk.clone import clone_file
from ..disk.layers import MAX_CHAIN, LayerInfo, needs_flatten
from ..drivers import SwitchUnknownError, VmmError
from ..errors import HostError
from ..image import Image
from ..saved import memory
from ..snapshot.errors import SnapshotError
from ..snapshot.manifest import MEMORY_DIR, SnapshotManifest
from ..snapshot.store import Snapshots, disk_usage
from . import faults, suspend
from .boot import Machines
from .disk_switch import freeze_disk, point, prepare_switch
from .machine import Machine, MachineSpec

FREEZE_TIMEOUT = 10.0  # the guest thaws by itself after this, whatever happens here
MIB = 1024 * 1024

log = logging.getLogger(__name__)


async def _running_disk_only(snaps: Snapshots, m: Machines, machine: Machine) -> tuple[Path, float]:
    frozen = False
    client = None
    try:
        client = await machine.client(timeout=5.0)
        await client.fs_freeze(FREEZE_TIMEOUT)
        frozen = True
    except (AgentError, HostError) as exc:  # crash-consistent then: the vCPUs stop alone
        log.warning("%s: filesystem not frozen for a snapshot: %s", machine.computer_id, exc)
    try:
        await machine.vm.pause()
        faults.reached("snapshot.vcpus_stopped")
        started = time.monotonic()
        try:
            layer = await freeze_disk(snaps, m, machine.dir, machine.vm)
        finally:
            await machine.vm.continue_running()
            paused = time.monotonic() - started
    finally:
        if frozen and client is not None:
            with contextlib.suppress(AgentError):
                await client.fs_thaw()
    return layer, paused


async def _running_with_memory(
    snaps: Snapshots,
    m: Machines,
    machine: Machine,
    spec: MachineSpec,
    image: Image,
    tmp: Path,
    live: bool,
) -> tuple[Path, float]:
    vm = machine.vm
    mem = tmp / MEMORY_DIR
    mem.mkdir(mode=0o700)
    stream = mem / f"{memory.VMSTATE}.tmp"
    hv = await m.choose(image)
    keys = suspend.compat(spec, image, hv), time.monotonic(), m.memory_key
    with suspend.own_memory(m, machine) as own:  # a resume's: only the pages written since
        if live and saves_live(m.settings.snapshot, hv.capabilities.live_memory_save, own):
            layer, paused = await _live(snaps, m, machine, stream)
            size = spec.memory_mib * MIB
            await asyncio.to_thread(
                memory.write_from_stream, mem, stream, size, *keys, vm.split_saved_state
            )
            return layer, paused
        return await _stopped_with_memory(snaps, m, machine, spec, stream, own, keys)


def saves_live(setting: str, can: bool, own: int | None) -> bool:
    """Whether a running computer's memory is saved as its guest runs (SANBOX_SNAPSHOT): never
    where the hypervisor cannot (`can`), nor when `stopped` is asked; with `auto`, not for a
    computer resumed from its own saved memory (`own`), whose stopped save is only the pages
    it wrote since."""
    if not can or setting == "stopped":
        return False
    return setting == "live" or own is None


async def _stopped_with_memory(
    snaps: Snapshots,
    m: Machines,
    machine: Machine,
    spec: MachineSpec,
    stream: Path,
    own: int | None,
    keys: tuple[dict[str, object], float, bytes],
) -> tuple[Path, float]:
    vm, mem, size = machine.vm, stream.parent, spec.memory_mib * MIB
    await vm.pause()
    faults.reached("snapshot.vcpus_stopped")
    started = time.monotonic()
    ram_in_stream = False
    written: list[tuple[int, int]] | None = None
    try:
        layer = await freeze_disk(snaps, m, machine.dir, vm)
        if own is not None:
            into = memory.new_memory_file(mem, size)
            try:
                written = await vm.save_state_in_place(stream, own, into)
            finally:
                os.close(into)
        if written is None:
            ram_in_stream = await vm.save_state(stream)
        faults.reached("snapshot.state_saved")
        if written is None and not ram_in_stream:  # a shared RAM file: copied while stopped
            ram = m.data_dir.ram_file(spec.computer_id)
            await asyncio.to_thread(memory.write, mem, stream, ram, *keys)
    finally:
        await vm.continue_running()
        paused = time.monotonic() - started
    if written is not None:  # the rest of its RAM is the mapped file's, unchanged as it runs
        assert own is not None
        await asyncio.to_thread(memory.write_beside, mem, stream, own, written, *keys)
    elif ram_in_stream:  # the stream holds the RAM as it was: taken out after the VM runs on
        await asyncio.to_thread(
            memory.write_from_stream, mem, stream, size, *keys, vm.split_saved_state
        )
    return layer, paused


async def _live(
    snaps: Snapshots, m: Machines, machine: Machine, stream: Path
) -> tuple[Path, float]:
    """The RAM and device state saved into `stream` while the guest runs: its vCPUs stop only
    for the last pages, and the disk switches to a new overlay (made beforehand) at that
    instant. On failure the guest runs on, on its old disk if the switch had not happened."""
    cdir, vm = machine.dir, machine.vm
    switch = await asyncio.to_thread(prepare_switch, snaps, m, cdir)
    switched = False

    async def at_stop() -> None:
        nonlocal switched
        faults.reached("snapshot.vcpus_stopped")
        point(cdir, str(switch.overlay))
        try:
            await vm.switch_disk(switch.overlay)
        except SwitchUnknownError:
            switched = True  # as far as its files go: the overlay stays its disk (freeze_disk)
            raise
        except BaseException:
            point(cdir, switch.old_target)
            raise
        switched = True

    unknown = False
    try:
        stopped_at = await vm.save_state_live(stream, at_stop)
        faults.reached("snapshot.state_saved")
    except BaseException as exc:
        unknown = isinstance(exc, SwitchUnknownError)
        if unknown:  # the guest may write to either file: it ends (see `freeze_disk`)
            await vm.kill()
        elif not switched:
            await asyncio.to_thread(switch.undo, cdir)
        if isinstance(exc, VmmError):
            raise SnapshotError(
                f"the memory of {machine.computer_id} was not saved: {exc}"
            ) from exc
        raise
    finally:
        if not unknown:
            await vm.continue_running()
    paused = time.monotonic() - stopped_at
    for d in (cdir.root, snaps.layers.root):
        await asyncio.to_thread(fsync_path, d)
    return switch.layer, paused


def _copy_saved_state(state: Path, dest: Path, key: bytes) -> None:
    """A paused computer's saved state, copied as it is (checked first: a damaged state is not
    made into a snapshot)."""
    saved = memory.load(state, {}, key)
    dest.mkdir(mode=0o700)
    for name in (memory.VMSTATE, memory.MEMORY, memory.MANIFEST):
        clone_file(state / name, dest / name)
    memory.load(dest, {}, key)
    if saved.memory_bytes != (dest / memory.MEMORY).stat().st_size:
        raise SnapshotError("the saved memory changed while it was copied")


def _own_size(layer: LayerInfo, tmp: Path) -> int:
    return layer.size_bytes + disk_usage(tmp)


async def take(
    m: Machines,
    snaps: Snapshots,
    snapshot_id: str,
    computer_id: str,
    machine: Machine | None,
    spec: MachineSpec,
    image: Image,
    memory_too: bool,
    live: bool = True,
) -> SnapshotManifest:
    """A snapshot of the computer's disk (and `memory_too`); a running computer's memory is
    saved as it runs where the driver can and `live` (a fork, whose copies wait for all of it,
    takes the quicker stopped way)."""
    cdir = m.data_dir.computer(computer_id)
    if not cdir.disk.is_file():
        raise SnapshotError(f"computer {computer_id} has no disk on this host")
    if memory_too and machine is None and not memory.exists(cdir.state):
        raise SnapshotError(f"computer {computer_id} has no memory to keep: it is not running")
    await asyncio.to_thread(snaps.ensure)
    tmp = snaps.tmp_dir(snapshot_id)
    if m.data_dir.snapshot(snapshot_id).exists():
        raise SnapshotError(f"snapshot {snapshot_id} exists already")
    async with snaps.lock:
        snaps.in_progress.add(snapshot_id)
        try:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            tmp.mkdir(mode=0o700)
            return await _take(m, snaps, snapshot_id, cdir, machine, spec, image, memory_too, live)
        except OSError as exc:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            words = exc.strerror or str(exc)
            raise SnapshotError(f"could not write snapshot {snapshot_id}: {words}") from exc
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            raise
        finally:
            snaps.in_progress.discard(snapshot_id)


async def _take(
    m: Machines,
    snaps: Snapshots,
    snapshot_id: str,
    cdir: ComputerDir,
    machine: Machine | None,
    spec: MachineSpec,
    image: Image,
    memory_too: bool,
    live: bool,
) -> SnapshotManifest:
    tmp = snaps.tmp_dir(snapshot_id)
    layer_path: Path | None = None
    paused = 0.0
    cut_off = await asyncio.to_thread(_frozen_but_unrecorded, snaps, cdir)
    if cut_off is not None:  # a snapshot a crash cut off froze it: a layer like any other now
        await asyncio.to_thread(snaps.layers.record, cut_off)
    try:
        if machine is None:
            layer_path = await freeze_disk(snaps, m, cdir, None)
            if memory_too:
                await asyncio.to_thread(
                    _copy_saved_state, cdir.state, tmp / MEMORY_DIR, m.memory_key
                )
        elif memory_too:
            layer_path, paused = await _running_with_memory(
                snaps, m, machine, spec, image, tmp, live
            )
        else:
            layer_path, paused = await _running_disk_only(snaps, m, machine)
    except BaseException:  # a layer frozen is a layer kept: the computer's disk stands on it
        path = layer_path or await asyncio.to_thread(_frozen_but_unrecorded, snaps, cdir)
        if path is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(snaps.layers.record, path)
        raise
    frozen = await asyncio.to_thread(snaps.layers.record, layer_path)
    top = frozen
    if needs_flatten(frozen.depth):
        top = await asyncio.to_thread(snaps.layers.flatten, frozen, _bottom(snaps, frozen))
        if machine is None:  # the computer's own overlay moves onto the flat copy too
            await asyncio.to_thread(qcow2.rebase, cdir.disk, snaps.layers.path(top.id), True)
    if machine is not None and 1 + frozen.depth > MAX_CHAIN and _bottom_is_image(snaps, frozen):
        await machine.vm.stream_disk(_bottom(snaps, frozen))
    disk_bytes = await asyncio.to_thread(m.disks.size, cdir.disk)
    snap = SnapshotManifest(
        id=snapshot_id,
        computer_id=cdir.root.name,
        layer=top.id,
        layer_digest=top.digest,
        disk_bytes=disk_bytes,
        memory=memory_too,
        image=image.build_id,
        vcpus=spec.vcpus,
        memory_mib=spec.memory_mib,
        size_bytes=_own_size(top, tmp),
        paused_seconds=round(paused, 4),
        created_at=time.time(),
    )
    await asyncio.to_thread(snaps.commit, tmp, snap)
    return snap


def flat_copy_bytes(snaps: Snapshots, cdir: ComputerDir) -> int:
    """Bytes a snapshot of the computer writes beside its new overlay: when the layer its disk
    becomes would be too deep (`needs_flatten`), the flat copy `_take` makes of it holds what
    its chain's files hold above the image, at most its disk's size (admission counts it before
    the snapshot is taken); 0 when it would not. A chain it cannot read counts its disk's size
    (the take itself says what is wrong)."""
    disk = cdir.disk
    try:
        if not disk.is_file() or not needs_flatten(1 + snaps.layers.depth_below(disk)):
            return 0
        size = virtual_size(disk)
    except (OSError, HostError):
        return 0
    return snaps.layers.flat_copy(disk, size)


def _frozen_but_unrecorded(snaps: Snapshots, cdir: ComputerDir) -> Path | None:
    """The layer the computer's disk stands on if it has no manifest yet (a switch that
    happened before a failure)."""
    disk = cdir.disk
    if snaps.layers.id_of(disk) is None or not disk.is_file():
        return None
    with contextlib.suppress(OSError, HostError):
        backing = qcow2.backing_of(disk)
        lid = None if backing is None else snaps.layers.id_of(backing)
        if lid is None:
            return None
        try:
            snaps.layers.load(lid)
        except HostError:
            return snaps.layers.path(lid)
    return None


def _bottom(snaps: Snapshots, info: LayerInfo) -> Path:
    """What a chain stands on: the image under its lowest layer (or that layer, if raw)."""
    while True:
        if info.backing is None:
            return snaps.layers.path(info.id)
        lid = snaps.layers.id_of(Path(info.backing))
        if lid is None:
            return Path(info.backing)
        info = snaps.layers.load(lid)


def _bottom_is_image(snaps: Snapshots, info: LayerInfo) -> bool:
    return snaps.layers.id_of(_bottom(snaps, info)) is None
