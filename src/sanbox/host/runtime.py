"""The host's one door, in process: `HostRuntime` implements `door.Host` by composing the host's
parts, each given its collaborators when it is made:

- `Machines` (machines/boot.py): the driver, confinement, boot, attach, shutdown, kill, destroy;
- the pause and resume flows (machines/suspend.py), given the machines;
- `Snapshots` (snapshot/store.py) with its `LayerStore`: snapshots and layers at rest;
- the snapshot, restore and fork flows (machines/snapshot.py, machines/restore.py), given the
  machines and the snapshots.

No part is handed the runtime; the runtime holds no behaviour of its own beyond choosing which
part answers.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

from .data import space
from .data.layout import DataDir
from .data.space import Room
from .disk import Disk, DiskManager
from .disk.layers import LayerStore
from .disk.transfer import DiskExport
from .drivers import Capabilities, Driver, VmHandle
from .drivers.cgroup import Cgroups
from .egress.budget import ConnectionBudget
from .egress.computers import ComputersEgress
from .egress.gateway import EgressGateway, Intercepts, OnDenied, OrgOf
from .egress.reach import Reach
from .egress.resolver import Resolver
from .image import Image, find_build, find_image, list_builds, remove_build
from .machines import carry, console, orphans, restore, snapshot, suspend
from .machines.boot import SHUTDOWN_TIMEOUT, Machines
from .machines.boot import MachineNotFoundError as MachineNotFoundError
from .machines.machine import Machine as Machine
from .machines.machine import MachineSpec as MachineSpec
from .net import Network
from .saved import memory
from .saved.memory import MemoryOutcome, SavedState
from .settings import HostSettings
from .snapshot import SnapshotManifest, Snapshots
from .snapshot.transfer import SnapshotExport


class HostRuntime:
    def __init__(
        self,
        data_dir: DataDir,
        hypervisor: Driver | None = None,
        networking: bool = True,
        settings: HostSettings | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings or HostSettings.from_env()
        self.disks = DiskManager(data_dir)
        # every computer gets its own network namespace (needs root: CAP_NET_ADMIN)
        self.network = Network(data_dir.computers, data_dir.tag) if networking else None
        self.machines = Machines(data_dir, self.settings, self.disks, self.network, hypervisor)

    # what the host is -----------------------------------------------------------------------

    @property
    def driver(self) -> Driver:
        return self.machines.driver

    @property
    def cgroups(self) -> Cgroups:
        return self.machines.cgroups

    @property
    def memory_key(self) -> bytes:
        return self.machines.memory_key

    async def hypervisor(self, image: Image) -> Driver:
        """The driver for this host, chosen once (see `Machines.choose`)."""
        return await self.machines.choose(image)

    def capabilities(self) -> Capabilities:
        return self.machines.driver.capabilities

    def driver_facts(self) -> tuple[str, str]:
        return self.machines.driver_facts()

    def confinement(self) -> dict[str, object]:
        return self.machines.confinement()

    async def console_lines(self, computer_id: str, count: int) -> list[str]:
        log = self.machines.console_log(computer_id)
        return await asyncio.to_thread(console.lines, log, count)

    def storage(self) -> tuple[str, bool]:
        """Its data dir, and whether it reflinks (probed once: a host's report asks every few
        seconds, and a probe writes scratch files)."""
        return str(self.data_dir.root), self.disks.reflink()

    def admission(self) -> tuple[float, int] | None:
        return None  # this server's own: its settings admit

    def flat_copy_bytes(self, computer_id: str) -> int:
        return snapshot.flat_copy_bytes(self.snapshots, self.data_dir.computer(computer_id))

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        dd, driver = self.data_dir, self.driver
        ram = space.ram_room(dd.ram_dir, computer_id, dd, self.vm_overhead(), driver.isolation)
        return ram, (space.disk_room(dd, computer_id) if disk else None)

    def vm_overhead(self) -> int:
        """Bytes memory admission counts for each VM's hypervisor beyond its guest RAM: the
        operator's SANBOX_VM_OVERHEAD_MIB, else the driver's estimate."""
        mib = self.settings.vm_overhead_mib
        if mib is None:
            mib = self.driver.capabilities.hypervisor_memory_mib
        return mib * space.MIB

    # images (image/) ----------------------------------------------------------------------

    def image(self, template: str, build_id: str | None = None) -> Image:
        return find_image(self.data_dir, template, build_id)

    def build(self, build_id: str) -> Image:
        return find_build(self.data_dir, build_id)

    def builds(self) -> list[Image]:
        return list_builds(self.data_dir)

    def remove_build(self, image: Image) -> None:
        remove_build(self.data_dir, image)

    def cpu_usec(self, computer_id: str) -> int | None:
        return self.machines.cpu_usec(computer_id)

    async def sweep(self, known: set[str]) -> list[str]:
        """Remove what belongs to no computer in `known` (the caller's records): `orphans.sweep`."""
        m = self.machines
        parts = self.data_dir, self.destroy, self.network, m.cgroups
        return await orphans.sweep(known, *parts, m.driver.is_vm_process)

    # egress (egress/): each computer's firewall, DNS filter and proxies ----------------------

    def open_egress(
        self,
        resolver: Resolver,
        on_denied: OnDenied,
        reach: Reach,
        max_connections: int,
        intercepts: Intercepts,
        budget: ConnectionBudget,
        org_of: OrgOf,
    ) -> ComputersEgress | None:
        """This host's computers' egress, through one gateway given the control plane's parts
        (where denials are recorded, what each computer's proxy intercepts, its org); None where
        the host makes no network of its own (tests' stand-ins)."""
        if self.network is None:
            return None
        gateway = EgressGateway(
            resolver,
            on_denied,
            reach,
            max_connections,
            intercepts=intercepts,
            budget=budget,
            org_of=org_of,
        )
        return ComputersEgress(gateway, self.network)

    # machines (machines/boot.py) ----------------------------------------------------------

    async def create(self, spec: MachineSpec, image: Image) -> tuple[Machine, Disk]:
        return await self.machines.create(spec, image)

    async def start(self, spec: MachineSpec, image: Image) -> Machine:
        return await self.machines.start(spec, image)

    def attach_vm(self, computer_id: str) -> VmHandle | None:
        return self.machines.attach_vm(computer_id)

    async def attach(self, computer_id: str, timeout: float = 10.0) -> Machine | None:
        return await self.machines.attach(computer_id, timeout)

    async def shutdown(self, machine: Machine, timeout: float = SHUTDOWN_TIMEOUT) -> bool:
        return await self.machines.shutdown(machine, timeout)

    async def kill(self, computer_id: str) -> None:
        await self.machines.kill(computer_id)

    async def destroy(self, computer_id: str) -> None:
        await self.machines.destroy(computer_id)

    async def quarantine(self, computer_id: str) -> str:
        return str(await self.machines.quarantine(computer_id))

    async def run_saved(
        self, spec: MachineSpec, image: Image, vmstate: Path, memory_file: Path | None
    ) -> Machine:
        return await self.machines.run_saved(spec, image, vmstate, memory_file)

    # a stopped computer's disk, or a snapshot, to another host (machines/carry.py) -------

    def export_bytes(self, item_id: str) -> int:
        """Bytes an export of a computer's disk or of a snapshot writes here, at most."""
        return carry.export_bytes(self.snapshots, item_id)

    async def export_disk(self, computer_id: str, image: Image) -> DiskExport:
        return await carry.export_disk(self.machines, computer_id, image)

    async def export_snapshot(self, snapshot_id: str, image: Image) -> SnapshotExport:
        return await carry.export_snapshot(self.data_dir, self.snapshots, snapshot_id, image)

    def export_chunks(self, item_id: str, name: str) -> AsyncGenerator[bytes, None]:
        return carry.export_chunks(self.data_dir, item_id, name)

    async def drop_export(self, item_id: str) -> None:
        await carry.drop_export(self.data_dir, item_id)

    async def drop_exports(self) -> None:
        """Every export (at a host agent's start: what a caller that died began)."""
        await carry.drop_exports(self.data_dir)

    async def import_disk(
        self,
        computer_id: str,
        export: DiskExport,
        image: Image | None,
        chunks: AsyncIterator[bytes],
    ) -> None:
        await carry.import_disk(self.machines, computer_id, export, image, chunks)

    async def import_snapshot(
        self, snapshot_id: str, export: SnapshotExport, image: Image, chunks: AsyncIterator[bytes]
    ) -> SnapshotManifest:
        return await carry.import_snapshot(self.snapshots, snapshot_id, export, image, chunks)

    # memory: pause and resume (machines/suspend.py) ---------------------------------------

    def compat(self, spec: MachineSpec, image: Image) -> dict[str, object]:
        """What a saved state must match to be loaded on this host."""
        return suspend.compat(spec, image, self.machines.driver)

    async def pause(self, machine: Machine, spec: MachineSpec, image: Image) -> SavedState:
        """Save memory and devices to the state dir, durably, and end the VM process. If that
        cannot complete, the VM runs on as it was and PauseError says why."""
        return await suspend.pause(self.machines, machine, spec, image)

    async def resume(self, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]:
        """Start from the saved state if it is usable, its memory mapped privately; otherwise
        boot fresh on the disk. Either way the outcome says what happened to memory, and the
        disk is never lost."""
        return await suspend.resume(self.machines, spec, image)

    def has_saved_memory(self, computer_id: str) -> bool:
        """Whether a paused computer's saved state is on this host."""
        return memory.exists(self.data_dir.computer(computer_id).state)

    async def drop_saved_memory(self, computer_id: str) -> None:
        """Remove a paused computer's saved state (a stop of a paused computer), and what a save
        that did not finish left. Memory a running VM maps is not in the state dir
        (`mapped_memory.mapped_file`): it is never touched."""
        state = self.data_dir.computer(computer_id).state
        await asyncio.to_thread(memory.discard, state)
        await asyncio.to_thread(memory.clear_unfinished, state)

    # snapshots and forks (snapshot/, machines/snapshot.py, machines/restore.py) -----------

    @functools.cached_property
    def snapshots(self) -> Snapshots:
        """The snapshot and layer store (layers readable by the VMs' group, written by none)."""
        m = self.machines
        user = m.vm_user()
        layers = LayerStore(self.data_dir, m.memory_key, None if user is None else user.gid)
        return Snapshots(self.data_dir, m.memory_key, layers)

    async def snapshot(
        self,
        snapshot_id: str,
        computer_id: str,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        memory: bool = False,
        live: bool = True,
    ) -> SnapshotManifest:
        """Snapshot a computer (`machine`: its running VM, else None) as `snapshot_id`: its
        disk, and its memory when asked (running, or paused with a saved state). `live`: a
        running guest's memory is saved as it runs where the driver can; False takes the
        stopped way, quicker in all where nobody waits on the guest (a template's build)."""
        return await snapshot.take(
            self.machines,
            self.snapshots,
            snapshot_id,
            computer_id,
            machine,
            spec,
            image,
            memory,
            live=live,
        )

    async def create_from_snapshot(
        self, spec: MachineSpec, image: Image, snapshot_id: str
    ) -> tuple[Machine, MemoryOutcome | None]:
        """A new computer from a snapshot, with a new identity; the outcome is None for a
        disk-only snapshot (booted), else what happened to its memory."""
        return await restore.create_from_snapshot(
            self.machines, self.snapshots, spec, image, snapshot_id
        )

    async def fork(
        self,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        new_specs: list[MachineSpec],
        memory: bool = True,
    ) -> list[Machine]:
        """len(new_specs) running copies of a computer, each with its own identity: from its
        memory (`machine`, or None: its saved state) or, without `memory`, booted on its disk."""
        return await restore.fork(
            self.machines, self.snapshots, machine, spec, image, new_specs, memory
        )

    async def finish_copy(self, machine: Machine, hostname: str, size_bytes: int) -> None:
        """Give a running copy (restored, forked, claimed) its own identity again, its disk grown
        to `size_bytes` first if smaller: for a copy whose maker stopped before it had them. Safe
        to repeat: every call draws a new machine-id, new host keys and fresh entropy."""
        await self.grow_disk(machine, size_bytes)
        await restore.new_identity(await machine.client(), hostname)

    async def grow_disk(self, machine: Machine, size_bytes: int) -> None:
        """Grow a running computer's disk to `size_bytes`, its root filesystem with it (online);
        nothing if it is that large already."""
        if size_bytes > await asyncio.to_thread(self.disks.size, machine.dir.disk):
            await restore.grow_running(machine, size_bytes)

    def snapshot_ids(self) -> list[str]:
        """The snapshots on this host."""
        return self.snapshots.ids()

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot; the layers it alone needed go too."""
        await self.snapshots.discard(snapshot_id)

    async def delete_snapshots(self, snapshot_ids: list[str]) -> int:
        """Remove snapshots and the layers only they needed; the bytes freed on disk."""
        async with self.snapshots.lock:
            return await asyncio.to_thread(self.snapshots.delete_many, snapshot_ids)

    async def snapshot_layers(self, snapshot_ids: list[str]) -> dict[str, list[str]]:
        """Each snapshot's disk layer and the layers under it, its own first."""
        async with self.snapshots.lock:
            return await asyncio.to_thread(self.snapshots.layer_chains, snapshot_ids)

    async def gc_layers(self) -> list[str]:
        """Delete the disk layers nothing references (call after destroying computers)."""
        return await self.snapshots.collect_unused()
