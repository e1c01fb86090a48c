"""Machines on this host: boot a computer from an image or from saved state, wait for its agent,
shut it down cleanly (or kill it), re-attach to it, destroy it. Every VM is started through the
host's driver, confined (the VM user, the computer's own cgroups) when the host confines.

Each acquisition registers its own undo on an AsyncExitStack, so a failure halfway leaves nothing:
no process, no socket, no disk, no folder. `Machines` is given its collaborators (the data dir,
the settings, the disks, the network, the driver if the caller chose one) and is itself what the
pause, snapshot and restore flows (suspend.py, snapshot.py, restore.py) are given.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from ...tasks import cancel_and_wait
from ..agent import AgentClient, AgentError, RemoteError
from ..data.layout import ComputerDir, DataDir
from ..disk import GIB, Disk, DiskManager
from ..drivers import (
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
from ..drivers.cgroup import Cgroups
from ..drivers.confine import UidRange, computer_user, describe, vm_user
from ..errors import HostError
from ..image import Image
from ..keys.secret import derived_key
from ..net import Network
from ..saved import mapped_memory, memory
from ..settings import HostSettings, SettingsError
from . import console
from .machine import Machine, MachineSpec

BOOT_TIMEOUT = 180.0  # under TCG and load, boots of many guests at once take long
SHUTDOWN_TIMEOUT = 15.0


class MachineNotFoundError(HostError):
    code = "computer_not_found"


class Machines:
    def __init__(
        self,
        data_dir: DataDir,
        settings: HostSettings,
        disks: DiskManager,
        network: Network | None,
        driver: Driver | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.disks = disks
        self.network = network
        self._driver = driver
        self._memory_key: bytes | None = None
        # VMs confined (seccomp, the VM user, cgroups) when this host picks the driver (needs root)
        self.confined = driver is None and os.geteuid() == 0
        self.cgroups = Cgroups.detect() if self.confined else Cgroups({})
        self._vm_user: VmUser | None = None
        try:  # the uids its VMs run as: read at start, so a bad setting stops the host at once
            self.uids = UidRange.parse(settings.vm_uids) if settings.vm_uids else UidRange()
        except ValueError as exc:
            raise SettingsError(f"SANBOX_VM_UIDS: {exc}") from exc

    # the driver and confinement -----------------------------------------------------------

    def vm_user(self) -> VmUser | None:
        """The user VMs run as (created on first use), or None when they are not confined."""
        if self.confined and self._vm_user is None:
            self._vm_user = vm_user()
        return self._vm_user

    def confinement(self) -> dict[str, object]:
        """What confines this host's VMs (seccomp, user, cgroups, disk errors, disk I/O bound)."""
        caps, rate = self.driver.capabilities, self.settings.disk_rate
        cgroups = self.cgroups.describe(self.data_dir.root, rate) if self.confined else {}
        return describe(caps, self.vm_user(), cgroups, rate)

    async def choose(self, image: Image) -> Driver:
        """The driver for this host, choosing acceleration once (probe cached per host)."""
        if self._driver is None:
            user = await asyncio.to_thread(self.vm_user)
            self._driver = await asyncio.to_thread(
                choose_driver,
                self.data_dir.host,
                image.kernel,
                image.initrd,
                user,
                self.settings.accel,
            )
        return self._driver

    @property
    def driver(self) -> Driver:
        """This host's driver: the one chosen (or given), else the one its cached probe names."""
        return self._driver or cached_driver(self.data_dir.host)

    def driver_facts(self) -> tuple[str, str]:
        """(hypervisor, isolation) as computers and the host show them; the isolation is
        `unknown` until the host has chosen (probed, or was given a driver)."""
        if self._driver is not None:
            return self._driver.name, self._driver.isolation
        choice = cached_choice(self.data_dir.host)
        if choice is None:
            return self.driver.name, "unknown"
        return choice.hypervisor, choice.isolation

    @property
    def memory_key(self) -> bytes:
        """The key that digests and MACs saved memory and layers (from the host's secret key)."""
        if self._memory_key is None:
            self._memory_key = derived_key(self.data_dir.secret_key, "memory-mac")
        return self._memory_key

    def cgroup_name(self, computer_id: str) -> str:
        return f"{self.data_dir.tag}-{computer_id}"

    def cpu_usec(self, computer_id: str) -> int | None:
        return self.cgroups.cpu_usec(self.cgroup_name(computer_id))

    def console_log(self, computer_id: str) -> Path:
        return self.data_dir.computer(computer_id).console_log

    # booting ------------------------------------------------------------------------------

    async def launch(self, driver: Driver, spec: VmSpec) -> VmHandle:
        """Boot `spec`, confined: as the VM user, inside the computer's own cgroups."""
        base = await asyncio.to_thread(self.vm_user)
        if base is None:
            return await driver.boot(spec)
        name = self.cgroup_name(spec.name)
        user = await asyncio.to_thread(computer_user, base, name, spec.run_dir, self.uids)
        limits = await asyncio.to_thread(self.cgroups.limits, spec, driver.capabilities)
        procs = await asyncio.to_thread(self.cgroups.create, name, limits)
        try:
            return await driver.boot(replace(spec, run_as=user, cgroup_procs=procs))
        except BaseException:
            await asyncio.to_thread(self.cgroups.remove, name)
            raise

    async def with_network(self, spec: MachineSpec) -> MachineSpec:
        if self.network is None or spec.net is not None:
            return spec
        return replace(spec, net=await self.network.ensure(spec.computer_id))

    def vm_spec(
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
            tcg_aslr=self.settings.tcg_aslr,
            disk_rate=self.settings.disk_rate,
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
        driver = await self.choose(image)
        cdir.logs.mkdir(parents=True, exist_ok=True)
        cdir.state.mkdir(parents=True, exist_ok=True)
        # a fresh boot: its disk moves past any saved memory (a pause whose answer was lost),
        # and what a save that did not finish left goes with it
        await asyncio.to_thread(memory.discard, cdir.state)
        await asyncio.to_thread(memory.clear_unfinished, cdir.state)
        spec = await self.with_network(spec)
        if self.network is not None:
            undo.push_async_callback(self.network.remove, spec.computer_id)
        self.data_dir.ram_file(spec.computer_id).unlink(missing_ok=True)  # a fresh boot
        mapped_memory.mapped_file(cdir.run).unlink(missing_ok=True)  # of a VM that ended by itself
        vm = await self.launch(driver, self.vm_spec(spec, image, cdir))
        undo.push_async_callback(self.kill_vm, vm)
        agent = await self.wait_ready(vm, cdir, clock=True)
        undo.push_async_callback(agent.close)
        await agent.catch_up_clock()
        return Machine(spec.computer_id, cdir, vm, agent)

    async def run_saved(
        self,
        spec: MachineSpec,
        image: Image,
        vmstate: Path,
        memory_file: Path | None,
        checking: asyncio.Future[None] | None = None,
        *,
        set_clock: bool = True,
    ) -> Machine:
        """A VM for `spec` (its computer dir and disk made already) started from a saved device
        state and the RAM in `memory_file`, running, its agent answering. `memory_file` is the
        VM's own saved memory (its run dir's `mapped_memory.mapped_file`, a resume), mapped
        privately; or a memory image many VMs map (a snapshot's), checked already (`memory.load`,
        `mapped_memory.verify_memory`): N VMs from one file share its clean pages. None: the RAM
        is in the shared RAM file in the RAM dir, made at its size already (SANBOX_RESTORE=copy, or
        a shared image copied there where the driver cannot map it read-only). `checking`: what
        must end before the state loads, run while the VM process starts (a resume's check of
        `memory_file`, `mapped_memory.check_taken`; a restore's copy into the RAM file); the VM is
        killed if it fails. `set_clock`: the slept guest's clock is set here, in the handshake
        (False: the caller's first call sets it, a copy's `new_identity`).

        A shared image is mapped read-only (`VmSpec.memory_readonly`: root's, never the VM
        user's) through a hard link in the VM's run dir (the file must be on the data
        filesystem), removed when its process ends; the snapshot may be deleted while they run
        (their mappings keep the pages; their pauses take RAM from the migration stream). A
        driver that cannot map a file read-only (`maps_read_only`) refuses a shared image
        (HostError): the caller copies it instead (restore.py). Nothing of a failed VM is left."""
        driver = await self.choose(image)
        spec = await self.with_network(spec)
        cdir = self.data_dir.computer(spec.computer_id)
        vm_spec = self.vm_spec(spec, image, cdir, restore=True)
        async with contextlib.AsyncExitStack() as undo:
            if memory_file is not None:
                mapped = mapped_memory.mapped_file(cdir.run)
                shared = memory_file != mapped
                if shared and not driver.capabilities.maps_read_only:
                    raise HostError(
                        f"{driver.name} cannot map a shared memory image read-only: "
                        "it is copied instead"
                    )
                if shared:
                    await asyncio.to_thread(mapped_memory.link_mapped, memory_file, mapped)
                undo.callback(mapped.unlink, missing_ok=True)
                vm_spec = replace(
                    vm_spec, memory_file=mapped, memory_private=True, memory_readonly=shared
                )
            try:
                vm = await self.launch(driver, vm_spec)
            except BaseException:
                if checking is not None:
                    await checking  # a corrupt file is said as such, not as a launch that failed
                raise
            undo.push_async_callback(self.kill_vm, vm)
            if checking is not None:
                await checking
            try:
                await vm.load_state(vmstate)
            except HostError as exc:  # its own words, before a fallback boot's launch replaces them
                said = console.tail(vm_spec.hypervisor_log, 4)
                raise VmStartError(
                    f"{exc}; {driver.name} said: {said}" if said else f"{exc}"
                ) from exc
            agent = await self.wait_ready(vm, cdir, timeout=30.0, clock=set_clock)
            if set_clock:
                await agent.catch_up_clock()  # the guest slept: its clock is behind
            undo.pop_all()
            return Machine(spec.computer_id, cdir, vm, agent)
        raise AssertionError("unreachable")

    async def wait_ready(
        self, vm: VmHandle, cdir: ComputerDir, timeout: float = BOOT_TIMEOUT, clock: bool = False
    ) -> AgentClient:
        """Connect to the agent; fail fast with the console's last words if the VM dies. With
        `clock`, the guest's clock is set in the handshake where its agent can."""
        connecting = AgentClient.connect(str(vm.agent_socket), timeout=timeout, clock=clock)
        connect = asyncio.ensure_future(connecting)
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
                await cancel_and_wait(connect, (AgentError,))

    # running machines ---------------------------------------------------------------------

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
            await self.kill_vm(machine.vm)
        return clean

    async def kill_vm(self, vm: VmHandle) -> None:
        """End a VM's process and remove what it ran with (sockets, RAM, mapping, cgroups)."""
        await vm.kill()
        for name in self.driver.run_files:
            (vm.run_dir / name).unlink(missing_ok=True)
        self.data_dir.ram_file(vm.run_dir.parent.name).unlink(missing_ok=True)
        mapped_memory.mapped_file(vm.run_dir).unlink(missing_ok=True)  # no process maps it any more
        await asyncio.to_thread(self.cgroups.remove, self.cgroup_name(vm.run_dir.parent.name))

    async def kill(self, computer_id: str) -> None:
        vm = self.attach_vm(computer_id)
        if vm is not None:
            await self.kill_vm(vm)
        self.data_dir.ram_file(computer_id).unlink(missing_ok=True)
        mapped_memory.mapped_file(self.data_dir.computer(computer_id).run).unlink(missing_ok=True)
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

    async def quarantine(self, computer_id: str) -> Path:
        """Kill the VM if it runs and set the computer's folder aside, disks kept, under the data
        dir's quarantine folder (root's only, so the uid its VM ran as, given to another
        computer later, cannot reach it); where it went."""
        await self.kill(computer_id)
        if self.network is not None:
            await self.network.remove(computer_id)
        cdir = self.data_dir.computer(computer_id)
        self.data_dir.quarantine.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.data_dir.quarantine, 0o700)
        to = self.data_dir.quarantine / f"{computer_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        try:
            os.rename(cdir.root, to)
        except OSError as exc:
            raise HostError(f"computer folder {cdir.root} could not be set aside: {exc}") from exc
        return to
