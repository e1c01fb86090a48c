"""New computers from a snapshot, and forks.

A new computer's disk is a new overlay on the snapshot's layer (constant time, whatever the
disk's size), after the snapshot's files are checked against its manifest. With memory, the VM
starts from the snapshot's device state and its saved RAM, which no VM may write, truncate or
re-own (it stays root's): where QEMU can map a file it opens read-only (>= 8.2) the RAM is mapped
copy-on-write from a hard link of the snapshot's memory file in the computer's run dir, checked
there (N computers from one snapshot share its clean pages, nothing is copied; N forks check it
once); on QEMU 7.2, which opens a mapped file read-write, the saved RAM is copied into the VM's
own RAM file, each chunk checked on the way (only the allocated chunks: what the guest had
touched; N forks' copies are made from the file checked once), started first, so that it runs
beside the check of the disk's layers, the overlay and the VM's start (the state loads once the
copy is whole, and checked). Restores run side by side.
The outcome says `restored`, or why not and the computer booted on the disk. A damaged
snapshot is refused with the reason, never used (the copy's check stops its QEMU unrun).

Every computer made this way gets a new identity before it is handed out (`new_identity`):
hostname, machine-id, entropy from the host credited and reseeded, the clock, and its SSH host
keys forgotten (the new one is made when first asked for: ~0.2 s of ssh-keygen under TCG that
a computer nobody connects to never pays).
A fork is a snapshot with memory and N such computers, all or none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent import AgentClient, AgentError
from ..data.layout import ComputerDir
from ..disk import GIB, qcow2
from ..errors import HostError
from ..image import Image
from ..saved import mapped_memory, memfile, memory
from ..saved.memory import MemoryOutcome, SavedState
from ..snapshot.errors import SnapshotCorruptError, SnapshotError
from ..snapshot.manifest import SnapshotManifest
from ..snapshot.store import Snapshots
from . import faults, suspend
from .boot import Machines
from .machine import Machine, MachineSpec
from .snapshot import take

ENTROPY_BYTES = 256

log = logging.getLogger(__name__)


async def new_identity(agent: AgentClient, hostname: str) -> None:
    """Give a copied computer its own identity."""
    await agent.new_identity(
        hostname, secrets.token_hex(16), os.urandom(ENTROPY_BYTES), time.time()
    )


@dataclass(frozen=True)
class _RamCopy:
    """A VM's own RAM file (where the driver cannot map the snapshot's file read-only), being
    filled from the snapshot's memory in a thread, each chunk checked on the way (or the file
    checked once for several copies: `_memory_once`)."""

    path: Path
    filling: asyncio.Future[None]

    async def settled(self) -> None:
        """Once its thread has ended: it is never left writing behind the caller."""
        await asyncio.wait([self.filling])
        if not self.filling.cancelled():
            self.filling.exception()  # raised through run_saved, or moot beside what failed first

    async def discard(self) -> None:
        await self.settled()
        self.path.unlink(missing_ok=True)


async def _start_copy(
    m: Machines,
    snaps: Snapshots,
    snap: SnapshotManifest,
    spec: MachineSpec,
    saved: SavedState,
    checked: asyncio.Future[Path] | None,
) -> _RamCopy:
    """The VM's own RAM file, made at its size, its filling started (`run_saved` awaits it
    before the state loads): each chunk checked on the way, or none where `checked` checks the
    snapshot's file where it lies (the filling then ends once that check has too)."""
    path = m.data_dir.ram_file(spec.computer_id)
    fd = await asyncio.to_thread(memfile.create, path, saved.memory_bytes)
    verified = checked is not None
    fill = asyncio.to_thread(_fill_copy, snaps, snap, saved, fd, m.memory_key, verified)
    return _RamCopy(path, asyncio.ensure_future(_filled(fill, checked)))


async def _filled(fill: Awaitable[None], checked: asyncio.Future[Path] | None) -> None:
    await fill
    if checked is not None:
        await asyncio.shield(checked)  # shared by a fork's copies: never cancelled by one


def _fill_copy(
    snaps: Snapshots,
    snap: SnapshotManifest,
    saved: SavedState,
    fd: int,
    key: bytes,
    verified: bool,
) -> None:
    """Copy the snapshot's memory into the RAM file open as `fd`, each chunk checked on the
    way unless it was `verified` where it lies; closes `fd`."""
    try:
        memory.fill_memory(snaps.memory_dir(snap.id), saved, fd, key, verified=verified)
    except memory.StateError as exc:
        raise SnapshotCorruptError(snap.id, exc.reason, str(exc)) from exc


def _check_memory(
    snaps: Snapshots, snap: SnapshotManifest, compat: dict[str, object], key: bytes
) -> Path:
    """Check the snapshot's memory where it lies, in one read pass; the file the VM maps (a
    hard link of it in the VM's run dir, made by `Machines.run_saved`: root's, read-only). A
    fault, or a manifest that no longer loads (its caller loaded it first), refuses it."""
    mem = snaps.memory_dir(snap.id)
    try:
        mapped_memory.verify_memory(mem, memory.load(mem, compat, key), key)
    except memory.StateError as exc:
        raise SnapshotCorruptError(snap.id, exc.reason, str(exc)) from exc
    return mem / memory.MEMORY


def disk_from_snapshot(
    snaps: Snapshots, snap: SnapshotManifest, cdir: ComputerDir, size_bytes: int = 0
) -> Path:
    """A new computer's disk: an overlay on the snapshot's layer (constant time), at least as
    large as the snapshot's disk."""
    size = max(snap.disk_bytes, size_bytes)
    qcow2.create_overlay(snaps.layers.path(snap.layer), cdir.overlay_disk, size)
    return cdir.overlay_disk


async def create_from_snapshot(
    m: Machines,
    snaps: Snapshots,
    spec: MachineSpec,
    image: Image,
    snapshot_id: str,
    *,
    checked: asyncio.Future[Path] | None = None,
) -> tuple[Machine, MemoryOutcome | None]:
    """A running computer from the snapshot. `checked`: the check of its memory where it lies,
    shared by a fork's computers (`_memory_once`), awaited before its state loads."""
    snap = await asyncio.to_thread(snaps.load, snapshot_id)
    if snap.image != image.build_id:
        raise SnapshotError(
            f"snapshot {snap.id} stands on image build {snap.image}, not {image.build_id}"
        )
    hv = await m.choose(image)
    compat = suspend.compat(spec, image, hv) if snap.memory else None
    outcome: MemoryOutcome | None = None
    saved: SavedState | None = None
    if compat is not None:
        try:
            saved = await asyncio.to_thread(snaps.saved_memory, snap, compat)
        except memory.StateError as exc:  # incompatible memory: the disk is still good
            outcome = MemoryOutcome(False, exc.reason)
            compat = None
    cdir = m.data_dir.computer(spec.computer_id)
    if cdir.root.exists():
        raise SnapshotError(f"computer folder {cdir.root} already exists")
    async with contextlib.AsyncExitStack() as undo:
        copy = None
        if saved is not None and not hv.capabilities.maps_read_only:
            # first: the copy (the longest step) runs beside the disk's check, the overlay and
            # the VM's start
            copy = await _start_copy(m, snaps, snap, spec, saved, checked)
            undo.push_async_callback(copy.discard)
        await asyncio.to_thread(snaps.verify_disk, snap)
        cdir.root.mkdir(parents=True)
        undo.callback(shutil.rmtree, cdir.root, True)
        if m.network is not None:  # made as its VM starts (a boot's own failure removes it too)
            undo.push_async_callback(m.network.remove, spec.computer_id)
        size = (spec.disk_gib or 0) * GIB
        # a restored guest knows its disk's old size: grown once it runs (a boot grows it first)
        first = snap.disk_bytes if compat is not None and size > snap.disk_bytes else size
        await asyncio.to_thread(disk_from_snapshot, snaps, snap, cdir, first)
        machine = None
        if compat is not None:
            machine, outcome = await _restore(m, snaps, snap, spec, image, compat, copy, checked)
        if machine is None:
            machine = await m.start(spec, image)
        undo.pop_all()  # from here on, a failure takes the whole computer away
        faults.reached("restore.before_identity")
        try:
            # first: nothing else is asked of the guest while it still shares its source's
            # kernel random state (microvm has no VM generation ID to reseed it by itself)
            await new_identity(await machine.client(), spec.hostname)
            if outcome is not None and outcome.restored and size > snap.disk_bytes:
                await grow_running(machine, size)  # a boot grows its filesystem by itself
        except BaseException:
            with contextlib.suppress(AgentError):
                await machine.agent.close()
            with contextlib.suppress(HostError):  # the failure above is the answer
                await m.destroy(spec.computer_id)
            raise
        faults.reached("restore.after_identity")
        return machine, outcome
    raise AssertionError("unreachable")


async def _memory_once(
    m: Machines, snaps: Snapshots, spec: MachineSpec, image: Image, snapshot_id: str
) -> asyncio.Future[Path]:
    """The check of N forks' snapshot memory where it lies (each fork would read and digest the
    same file again), started in a thread: the forks' VMs start meanwhile and their state loads
    once it has passed. Where the driver maps the file, they map the file checked; where it
    copies, the kernel copies it for each without a digest of its own (on 2 cores four forks'
    copies took 212 ms so against 312 checking each one; a root file written once and never
    truncated: what was checked is what is copied). A fault fails every fork, as their own
    checks would (`SnapshotCorruptError`)."""
    snap = await asyncio.to_thread(snaps.load, snapshot_id)
    compat = suspend.compat(spec, image, await m.choose(image))  # each fork's: fork() checked
    return asyncio.ensure_future(
        asyncio.to_thread(_check_memory, snaps, snap, compat, m.memory_key)
    )


async def grow_running(machine: Machine, size_bytes: int) -> None:
    """A running guest's disk grown to `size_bytes`, its root filesystem with it (online)."""
    await machine.vm.grow_disk(size_bytes)
    client = await machine.client()
    r = await client.exec(["resize2fs", "/dev/vda"], timeout=120, max_output=4096)
    if r.exit_code != 0:
        raise SnapshotError(f"growing the filesystem failed: {r.stderr.decode(errors='replace')}")


async def _restore(
    m: Machines,
    snaps: Snapshots,
    snap: SnapshotManifest,
    spec: MachineSpec,
    image: Image,
    compat: dict[str, object],
    copy: _RamCopy | None,
    checked: asyncio.Future[Path] | None = None,
) -> tuple[Machine | None, MemoryOutcome]:
    """The VM started from the snapshot's memory: `copy`, its own RAM file being filled (QEMU
    7.2 would open the snapshot's file read-write; its QEMU maps the copy, touching nothing
    before the state loads), else the snapshot's file itself, mapped from a read-only
    descriptor."""
    cdir = m.data_dir.computer(spec.computer_id)
    cdir.run.mkdir(parents=True, exist_ok=True)
    memory_file = None
    filling: asyncio.Future[Any] | None = copy.filling if copy is not None else None
    if copy is None and checked is not None:  # mapped as the shared check runs
        memory_file, filling = snaps.memory_dir(snap.id) / memory.MEMORY, asyncio.shield(checked)
    elif copy is None:
        memory_file = await asyncio.to_thread(_check_memory, snaps, snap, compat, m.memory_key)
    vmstate = snaps.memory_dir(snap.id) / memory.VMSTATE
    try:
        # its clock is set by `new_identity`, the first call its caller makes
        machine = await m.run_saved(spec, image, vmstate, memory_file, filling, set_clock=False)
        return machine, MemoryOutcome(True)
    except (HostError, AgentError, OSError) as exc:
        if copy is not None:  # (the snapshot's own file stays: run_saved dropped its link)
            await copy.discard()
        if isinstance(exc, SnapshotCorruptError):  # refused, never booted around
            raise
        log.warning("%s: memory of %s not restored: %s", spec.computer_id, snap.id, exc)
        return None, MemoryOutcome(False, f"restore failed: {exc}")
    finally:
        if copy is not None:
            await copy.settled()
        elif filling is not None:  # a view of the forks' shared check, which runs on for them
            filling.cancel()
            if not filling.cancelled():
                filling.exception()  # raised through run_saved, or moot beside what failed first


async def fork(
    m: Machines,
    snaps: Snapshots,
    machine: Machine | None,
    spec: MachineSpec,
    image: Image,
    new_specs: list[MachineSpec],
    memory: bool = True,
) -> list[Machine]:
    """N new running computers from one, each with a new identity. With `memory` each carries
    on from its source's memory (`machine` running, or None for a paused source's saved state):
    the source pauses only while its memory is saved; without, each boots on a copy of its
    disk. All or none."""
    if memory and any((s.vcpus, s.memory_mib) != (spec.vcpus, spec.memory_mib) for s in new_specs):
        raise SnapshotError("a fork keeps its source's vCPUs and memory size")
    snapshot_id = "snp_fork" + secrets.token_hex(8)
    await take(m, snaps, snapshot_id, spec.computer_id, machine, spec, image, memory, live=False)
    checked = None
    try:
        if len(new_specs) > 1 and memory:
            checked = await _memory_once(m, snaps, spec, image, snapshot_id)
        results = await asyncio.gather(
            *(
                create_from_snapshot(m, snaps, s, image, snapshot_id, checked=checked)
                for s in new_specs
            ),
            return_exceptions=True,
        )
    finally:
        if checked is not None:  # its thread has ended before the snapshot goes
            await asyncio.wait([checked])
            if not checked.cancelled():
                checked.exception()  # said by each fork that met it
        await snaps.discard(snapshot_id)  # the forks' disks keep the layers they stand on
    made = [r[0] for r in results if isinstance(r, tuple)]
    failed: list[BaseException] = [r for r in results if isinstance(r, BaseException)]
    lost = [
        r[1] for r in results if memory and isinstance(r, tuple) and not (r[1] and r[1].restored)
    ]
    if lost:  # a fork carries on from its source's memory, or it is not a fork
        failed.append(SnapshotError(f"a fork's memory was not restored: {lost[0]}"))
    if failed:
        for child in made:
            with contextlib.suppress(HostError):  # the first failure is the answer
                await m.destroy(child.computer_id)
        await snaps.collect_unused()
        raise failed[0]
    return made
