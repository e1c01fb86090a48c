"""The host-level lifecycle the control plane calls: boot a computer from an image, wait for its
agent, shut it down cleanly (or kill it), boot it again on the same disk, destroy it.

Each acquisition registers its own undo on an AsyncExitStack, so a failure halfway leaves nothing:
no process, no socket, no disk, no folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from .agent import AgentClient, AgentError, RemoteError
from .data.layout import ComputerDir, DataDir
from .disk import GIB, Disk, DiskManager
from .disk.layers import LayerStore
from .drivers import (
    Capabilities,
    Driver,
    VmHandle,
    VmNotRunningError,
    VmSpec,
    VmStartError,
    VmUser,
    cached_choice,
    cached_driver,
    choose_driver,
)
from .drivers.cgroup import Cgroups, limits_for
from .drivers.confine import computer_user, describe, vm_user
from .errors import HostError
from .image import Image
from .keys.secret import derived_key
from .machines import console, orphans, suspend
from .machines import restore as snapshot_restore
from .machines import snapshot as snapshot_take
from .machines.machine import Machine as Machine
from .machines.machine import MachineSpec as MachineSpec
from .net import Network
from .saved import memory
from .saved.memory import MemoryOutcome, SavedState
from .settings import HostSettings
from .snapshot import SnapshotManifest, Snapshots

BOOT_TIMEOUT = 180.0  # under TCG and load, boots of many guests at once take long
SHUTDOWN_TIMEOUT = 15.0


class MachineNotFoundError(HostError):
    code = "computer_not_found"


log = logging.getLogger(__name__)


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
        self._hypervisor = hypervisor
        # every computer gets its own network namespace (needs root: CAP_NET_ADMIN)
        self.network = Network(data_dir.computers, data_dir.tag) if networking else None
        self._memory_key: bytes | None = None
        # QEMU confined (seccomp, the VM user, cgroups) when this runtime picks it (needs root)
        self.confined = hypervisor is None and os.geteuid() == 0
        self.cgroups = Cgroups.detect() if self.confined else Cgroups({})
        self._vm_user: VmUser | None = None

    def vm_user(self) -> VmUser | None:
        """The user VMs run as (created on first use), or None when they are not confined."""
        if self.confined and self._vm_user is None:
            self._vm_user = vm_user()
        return self._vm_user

    def confinement(self) -> dict[str, object]:
        """What confines this host's VMs (seccomp, user, cgroup controllers, disk errors)."""
        caps = self.driver.capabilities
        cgroups = self.cgroups.describe() if self.confined else {}
        return describe(caps.seccomp, caps.disk_errors, self.vm_user(), cgroups)

    def cgroup_name(self, computer_id: str) -> str:
        return f"{self.data_dir.tag}-{computer_id}"

    async def _launch(self, hv: Driver, spec: VmSpec) -> VmHandle:
        """Boot `spec`, confined: as the VM user, inside the computer's own cgroups."""
        base = await asyncio.to_thread(self.vm_user)
        if base is None:
            return await hv.boot(spec)
        name = self.cgroup_name(spec.name)
        user = await asyncio.to_thread(computer_user, base, name, spec.run_dir)
        limits = limits_for(spec.vcpus, spec.memory_mib, hv.capabilities.memory_overhead_mib)
        procs = await asyncio.to_thread(self.cgroups.create, name, limits)
        try:
            return await hv.boot(replace(spec, run_as=user, cgroup_procs=procs))
        except BaseException:
            await asyncio.to_thread(self.cgroups.remove, name)
            raise

    @property
    def memory_key(self) -> bytes:
        """The key that digests and MACs saved memory (derived from the host's secret key)."""
        if self._memory_key is None:
            self._memory_key = derived_key(self.data_dir.secret_key, "memory-mac")
        return self._memory_key

    async def _with_network(self, spec: MachineSpec) -> MachineSpec:
        if self.network is None or spec.net is not None:
            return spec
        return replace(spec, net=await self.network.ensure(spec.computer_id))

    async def hypervisor(self, image: Image) -> Driver:
        """The driver for this host, choosing acceleration once (probe cached per host)."""
        if self._hypervisor is None:
            user = await asyncio.to_thread(self.vm_user)
            self._hypervisor = await asyncio.to_thread(
                choose_driver,
                self.data_dir.host,
                image.kernel,
                image.initrd,
                user,
                self.settings.accel,
            )
        return self._hypervisor

    def _vm_spec(
        self, spec: MachineSpec, image: Image, cdir: ComputerDir, restore: bool = False
    ) -> VmSpec:
        return VmSpec(
            name=spec.computer_id,
            kernel=image.kernel,
            initrd=image.initrd,
            disk=cdir.disk,
            run_dir=cdir.run,
            console_log=cdir.console_log,
            vcpus=spec.vcpus,
            memory_mib=spec.memory_mib,
            hostname=spec.hostname,
            net=spec.net,
            memory_file=self.data_dir.ram_file(spec.computer_id),
            restore=restore,
        )

    async def create(self, spec: MachineSpec, image: Image) -> tuple[Machine, Disk]:
        """A new computer: its folder, a disk cloned from the image, a booted VM, a live agent."""
        cdir = self.data_dir.computer(spec.computer_id)
        if cdir.root.exists():
            raise HostError(f"computer folder {cdir.root} already exists")
        async with contextlib.AsyncExitStack() as undo:
            cdir.root.mkdir(parents=True)
            undo.callback(shutil.rmtree, cdir.root, True)
            size = None if spec.disk_gib is None else spec.disk_gib * GIB
            disk = await asyncio.to_thread(self.disks.create, image.rootfs, cdir, size)
            machine = await self._boot(spec, image, cdir, undo)
            undo.pop_all()
            return machine, disk
        raise AssertionError("unreachable")

    async def start(self, spec: MachineSpec, image: Image) -> Machine:
        """Boot an existing computer again on its disk."""
        cdir = self.data_dir.computer(spec.computer_id)
        if not cdir.disk.is_file():
            raise MachineNotFoundError(f"computer {spec.computer_id} has no disk at {cdir.disk}")
        if self.attach_vm(spec.computer_id) is not None:
            raise HostError(f"computer {spec.computer_id} is already running")
        if spec.disk_gib is not None:
            await asyncio.to_thread(self.disks.grow, cdir.disk, spec.disk_gib * GIB)
        async with contextlib.AsyncExitStack() as undo:
            machine = await self._boot(spec, image, cdir, undo)
            undo.pop_all()
            return machine
        raise AssertionError("unreachable")

    async def _boot(
        self, spec: MachineSpec, image: Image, cdir: ComputerDir, undo: contextlib.AsyncExitStack
    ) -> Machine:
        hv = await self.hypervisor(image)
        cdir.logs.mkdir(parents=True, exist_ok=True)
        cdir.state.mkdir(parents=True, exist_ok=True)
        spec = await self._with_network(spec)
        if self.network is not None:
            undo.push_async_callback(self.network.remove, spec.computer_id)
        self.data_dir.ram_file(spec.computer_id).unlink(missing_ok=True)  # a fresh boot
        memory.mapped_file(cdir.run).unlink(missing_ok=True)  # of a VM that ended by itself
        vm = await self._launch(hv, self._vm_spec(spec, image, cdir))
        undo.push_async_callback(self._kill_and_clean, vm)
        agent = await self.wait_ready(vm, cdir)
        undo.push_async_callback(agent.close)
        with contextlib.suppress(AgentError):
            await agent.set_clock(time.time())
        return Machine(spec.computer_id, cdir, vm, agent)

    async def wait_ready(
        self, vm: VmHandle, cdir: ComputerDir, timeout: float = BOOT_TIMEOUT
    ) -> AgentClient:
        """Connect to the agent; fail fast with the console's last words if the VM dies."""
        connect = asyncio.ensure_future(AgentClient.connect(str(vm.agent_socket), timeout=timeout))
        try:
            while not connect.done():
                if not vm.alive():
                    tail = console.tail(cdir.console_log)
                    raise VmStartError(f"the VM exited during boot: {tail or 'no console output'}")
                await asyncio.wait({connect}, timeout=0.1)
            return connect.result()
        except AgentError as exc:
            tail = console.tail(cdir.console_log)
            raise VmStartError(f"the guest agent did not answer: {exc}. Console: {tail}") from exc
        finally:
            if not connect.done():
                connect.cancel()
                with contextlib.suppress(asyncio.CancelledError, AgentError):
                    await connect

    @property
    def driver(self) -> Driver:
        """This host's driver: the one chosen (or given), else the one its cached probe names."""
        return self._hypervisor or cached_driver(self.data_dir.host)

    def capabilities(self) -> Capabilities:
        return self.driver.capabilities

    def driver_facts(self) -> tuple[str, str]:
        """(hypervisor, isolation) as computers and the host show them; the isolation is
        `unknown` until the host has chosen (probed, or was given a driver)."""
        if self._hypervisor is not None:
            return self._hypervisor.name, self._hypervisor.isolation
        choice = cached_choice(self.data_dir.host)
        if choice is None:
            return self.driver.name, "unknown"
        return choice.hypervisor, choice.isolation

    async def sweep(self, known: set[str]) -> list[str]:
        """Remove what belongs to no computer in `known` (the caller's records): `orphans.sweep`."""
        parts = self.data_dir, self.destroy, self.network, self.cgroups
        return await orphans.sweep(known, *parts, self.driver.is_vm_process)

    def attach_vm(self, computer_id: str) -> VmHandle | None:
        cdir = self.data_dir.computer(computer_id)
        return self.driver.attach(cdir.run)  # before any boot: the cached choice's driver

    async def attach(self, computer_id: str, timeout: float = 10.0) -> Machine | None:
        """Re-attach to a computer's running VM (after a restart of the caller)."""
        vm = self.attach_vm(computer_id)
        if vm is None:
            return None
        agent = await AgentClient.connect(str(vm.agent_socket), timeout=timeout)
        return Machine(computer_id, self.data_dir.computer(computer_id), vm, agent)

    async def shutdown(self, machine: Machine, timeout: float = SHUTDOWN_TIMEOUT) -> bool:
        """Clean shutdown (sync, remount read-only, power off); SIGKILL after `timeout`.
        Returns True if the guest powered off by itself."""
        clean = asked = False
        try:
            try:
                client = await machine.client(timeout=5.0)
                asked = True
                await client.exec_stream(["/sbin/sanbox-poweroff"])
            except RemoteError:  # the guest answered that it will not: it is killed
                asked = False
            except (AgentError, VmNotRunningError):  # the agent went down with the guest, or
                pass  # the VM was gone already (killed, crashed)
            clean = asked and await machine.vm.wait_exit(timeout)
        finally:
            with contextlib.suppress(AgentError):
                await machine.agent.close()
            await self._kill_and_clean(machine.vm)
        return clean

    # memory: pause and resume (suspend.py) ------------------------------------------------

    def compat(self, spec: MachineSpec, image: Image) -> dict[str, object]:
        """What a saved state must match to be loaded on this host."""
        return suspend.compat(spec, image, self.driver)

    async def pause(self, machine: Machine, spec: MachineSpec, image: Image) -> SavedState:
        """Save memory and devices to the state dir, durably, and end the VM process. If that
        cannot complete, the VM runs on as it was and PauseError says why."""
        return await suspend.pause(self, machine, spec, image)

    async def resume(self, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]:
        """Start from the saved state if it is usable, its memory mapped privately; otherwise
        boot fresh on the disk. Either way the outcome says what happened to memory, and the
        disk is never lost."""
        return await suspend.resume(self, spec, image)

    async def run_saved(
        self, spec: MachineSpec, image: Image, vmstate: Path, memory_file: Path | None
    ) -> Machine:
        """Start a VM from a device state and checked saved RAM: its own file mapped privately,
        a shared image mapped read-only (forks: N calls with one file share its clean pages), or
        None for RAM copied into its RAM file already. See `suspend.run_saved`."""
        return await suspend.run_saved(self, spec, image, vmstate, memory_file)

    def has_saved_memory(self, computer_id: str) -> bool:
        """Whether a paused computer's saved state is on this host."""
        return memory.exists(self.data_dir.computer(computer_id).state)

    def console_log(self, computer_id: str) -> Path:
        return self.data_dir.computer(computer_id).console_log

    def cpu_usec(self, computer_id: str) -> int | None:
        return self.cgroups.cpu_usec(self.cgroup_name(computer_id))

    async def drop_saved_memory(self, computer_id: str) -> None:
        """Remove a paused computer's saved state (a stop of a paused computer). Memory a
        running VM maps is not in the state dir (`memory.mapped_file`): it is never touched."""
        await asyncio.to_thread(memory.discard, self.data_dir.computer(computer_id).state)

    # snapshots and forks (snapshot/) -----------------------------------------------------

    @functools.cached_property
    def snapshots(self) -> Snapshots:
        """The snapshot and layer store (layers readable by the VMs' group, written by none)."""
        user = self.vm_user()
        layers = LayerStore(self.data_dir, self.memory_key, None if user is None else user.gid)
        return Snapshots(self.data_dir, self.memory_key, layers)

    async def snapshot(
        self,
        snapshot_id: str,
        computer_id: str,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        memory: bool = False,
    ) -> SnapshotManifest:
        """Snapshot a computer (`machine`: its running VM, else None) as `snapshot_id`: its
        disk, and its memory when asked (running, or paused with a saved state)."""
        return await snapshot_take.take(
            self, self.snapshots, snapshot_id, computer_id, machine, spec, image, memory
        )

    async def create_from_snapshot(
        self, spec: MachineSpec, image: Image, snapshot_id: str
    ) -> tuple[Machine, MemoryOutcome | None]:
        """A new computer from a snapshot, with a new identity; the outcome is None for a
        disk-only snapshot (booted), else what happened to its memory."""
        return await snapshot_restore.create_from_snapshot(
            self, self.snapshots, spec, image, snapshot_id
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
        return await snapshot_restore.fork(
            self, self.snapshots, machine, spec, image, new_specs, memory
        )

    async def finish_copy(self, machine: Machine, hostname: str, size_bytes: int) -> None:
        """Give a running copy (restored, forked, claimed) its own identity again, its disk grown
        to `size_bytes` first if smaller: for a copy whose maker stopped before it had them. Safe
        to repeat: every call draws a new machine-id, new host keys and fresh entropy."""
        await self.grow_disk(machine, size_bytes)
        await snapshot_restore.new_identity(await machine.client(), hostname)

    def snapshot_ids(self) -> list[str]:
        """The snapshots on this host."""
        return self.snapshots.ids()

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot; the layers it alone needed go too."""
        async with self.snapshots.lock:
            await asyncio.to_thread(self.snapshots.delete, snapshot_id)
            await asyncio.to_thread(self.snapshots.collect)

    async def delete_snapshots(self, snapshot_ids: list[str]) -> int:
        """Remove snapshots and the layers only they needed; the bytes freed on disk."""
        async with self.snapshots.lock:
            return await asyncio.to_thread(self.snapshots.delete_many, snapshot_ids)

    async def snapshot_layers(self, snapshot_ids: list[str]) -> dict[str, list[str]]:
        """Each snapshot's disk layer and the layers under it, its own first."""
        async with self.snapshots.lock:
            return await asyncio.to_thread(self.snapshots.layer_chains, snapshot_ids)

    async def grow_disk(self, machine: Machine, size_bytes: int) -> None:
        """Grow a running computer's disk to `size_bytes`, its root filesystem with it (online);
        nothing if it is that large already."""
        if size_bytes > await asyncio.to_thread(self.disks.size, machine.dir.disk):
            await snapshot_restore.grow_running(machine, size_bytes)

    async def gc_layers(self) -> list[str]:
        """Delete the disk layers nothing references (call after destroying computers)."""
        async with self.snapshots.lock:
            return await asyncio.to_thread(self.snapshots.collect)

    async def _kill_and_clean(self, vm: VmHandle) -> None:
        await vm.kill()
        for name in ("agent.sock", "qmp.sock", "vm.pid"):
            (vm.run_dir / name).unlink(missing_ok=True)
        self.data_dir.ram_file(vm.run_dir.parent.name).unlink(missing_ok=True)
        memory.mapped_file(vm.run_dir).unlink(missing_ok=True)  # no process maps it any more
        await asyncio.to_thread(self.cgroups.remove, self.cgroup_name(vm.run_dir.parent.name))

    async def kill(self, computer_id: str) -> None:
        vm = self.attach_vm(computer_id)
        if vm is not None:
            await self._kill_and_clean(vm)
        self.data_dir.ram_file(computer_id).unlink(missing_ok=True)
        memory.mapped_file(self.data_dir.computer(computer_id).run).unlink(missing_ok=True)
        await asyncio.to_thread(self.cgroups.remove, self.cgroup_name(computer_id))

    async def destroy(self, computer_id: str) -> None:
        """Kill the VM if it runs and remove everything the computer had on this host."""
        await self.kill(computer_id)
        if self.network is not None:
            await self.network.remove(computer_id)
        cdir = self.data_dir.computer(computer_id)
        await asyncio.to_thread(shutil.rmtree, cdir.root, True)
        if cdir.root.exists():  # a file that could not be removed: never said gone
            raise HostError(f"computer folder {cdir.root} could not be removed")
