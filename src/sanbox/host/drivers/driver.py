"""The driver contract: every hypervisor boots a VmSpec into a detached process and can re-attach
to it by its run dir, and states what it can do as `Capabilities`: the host chooses by those,
never by a driver's name. Drivers: `qemu/` (QEMU -M microvm, KVM or TCG), `local/` (the guest
agent as a local process: the component tier's stand-in), `firecracker/` (KVM only).

A new driver implements `Driver` (boot, attach, capabilities) and `VmHandle` (liveness, kill,
pause and save/load of device state, the disk verbs its capabilities claim), and is chosen by
`select.py` where its probe says it works."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..disk_rate import DiskRate


@dataclass(frozen=True)
class NetAttachment:
    """A tap device (in its own network namespace, optionally) and the guest's address on it."""

    tap: str
    mac: str
    guest_cidr: str  # e.g. 10.0.0.2/30
    gateway: str
    dns: str | None = None
    netns: str | None = None


@dataclass(frozen=True)
class VmUser:
    """The unprivileged identity a VM process runs as (never root)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()  # supplementary groups, e.g. the group that owns /dev/kvm


@dataclass(frozen=True)
class VmSpec:
    name: str
    kernel: Path
    initrd: Path
    disk: Path
    run_dir: Path
    console_log: Path
    vcpus: int = 1
    memory_mib: int = 512
    hostname: str = "sanbox"
    net: NetAttachment | None = None
    memory_file: Path | None = None  # guest RAM as a shared file (tmpfs): fast pause/resume
    memory_private: bool = False  # memory_file is saved memory, mapped copy-on-write (a resume)
    # memory_file is a shared memory image (a snapshot's, mapped by many VMs): opened read-only,
    # never the VM user's; only where the driver says `maps_read_only`
    memory_readonly: bool = False
    restore: bool = False  # wait for a saved state (`-incoming defer`) instead of booting
    extra_cmdline: tuple[str, ...] = field(default_factory=tuple)
    tcg_aslr: bool = True  # False: under emulation, the guest boots without address randomization
    disk_rate: DiskRate = field(default_factory=DiskRate)  # its disk I/O bound (host/disk_rate.py)
    run_as: VmUser | None = None  # drop to this user before the hypervisor starts
    cgroup_procs: tuple[Path, ...] = ()  # join these cgroups (cgroup.procs files) first

    @property
    def agent_socket(self) -> Path:
        return self.run_dir / "agent.sock"

    @property
    def pidfile(self) -> Path:
        return self.run_dir / "vm.pid"

    @property
    def hypervisor_log(self) -> Path:
        """What the hypervisor process itself says (its stderr), beside the console log."""
        return self.console_log.with_name("hypervisor.log")


class Liveness(enum.Enum):
    """What a look at a VM process found. UNKNOWN: the look itself failed (no descriptor left,
    a transient error): nothing is known of the VM, and nobody may take it for dead."""

    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


class VmHandle(Protocol):
    """A running (or once running) VM process, not a child of the caller."""

    pid: int
    run_dir: Path
    isolation: str  # qemu-kvm, qemu-tcg, firecracker-kvm

    @property
    def agent_socket(self) -> Path: ...

    def alive(self) -> bool:
        """False only when the process is known to be gone (a look that failed is not a death:
        see `liveness`)."""

    def liveness(self) -> Liveness:
        """ALIVE, DEAD, or UNKNOWN when the look itself failed (descriptors exhausted, ...)."""

    async def frozen(self) -> bool | None:
        """Whether the host stopped its vCPUs (a save, a pause the caller never finished) so
        that `continue_running` runs them again; None if it could not be asked."""

    async def wait_exit(self, timeout: float) -> bool: ...

    async def kill(self, timeout: float = 5.0) -> None: ...

    async def disk_error(self) -> str | None:
        """None if it runs; `nospace` or `failed` if a disk error stopped the guest."""

    async def save_state(self, vmstate: Path) -> bool:
        """Stop the vCPUs and write the device state. Returns whether the stream carries the
        guest's RAM too (RAM mapped privately); if not, RAM is in the shared RAM file."""

    async def save_state_in_place(
        self, vmstate: Path, memory_fd: int, into_fd: int | None = None
    ) -> list[tuple[int, int]] | None:
        """For a VM resumed from its own saved memory (mapped privately), the file open as
        `memory_fd`: stop the vCPUs, write the device state alone to `vmstate` and the pages
        the guest wrote since into that file (which then holds its RAM), or into the file open
        as `into_fd` (which, with the rest of `memory_fd`'s pages, holds it); the (start, end)
        byte ranges written. None, with nothing done, where the driver or the file does not
        allow it (the caller takes `save_state`'s way). On failure the VM runs again."""
        ...

    async def save_state_live(self, vmstate: Path, at_stop: Callable[[], Awaitable[None]]) -> float:
        """Write the device state and the guest's RAM to `vmstate` while the vCPUs run (when
        `Capabilities.live_memory_save`): they stop only for the last of it, `at_stop` runs at
        that instant (a disk switch), and they stay stopped until `continue_running`. Returns
        when they stopped (`time.monotonic`). On failure the VM runs again."""
        ...

    def split_saved_state(
        self, stream: Path, vmstate: Path, memory: Path, memory_bytes: int
    ) -> None:
        """Take the guest's RAM out of a saved state that carries it (`save_state` said so):
        the device state to `vmstate`, the RAM (`memory_bytes`) to `memory`. Raises
        SavedStateError if the stream cannot be read."""

    async def load_state(self, vmstate: Path) -> None:
        """Load a saved device state into a VM booted with `restore=True`; it runs."""

    async def continue_running(self) -> None:
        """Let the vCPUs run again after a save that is not followed by a quit."""

    async def quit(self) -> None: ...

    # snapshots: `pause` + `save_state` (+ the RAM file) is Firecracker's `PATCH /vm Paused` +
    # `PUT /snapshot/create` (state file + memory file); `load_state` into a VM booted with
    # `restore=True` on that memory file (mapped privately) is `PUT /snapshot/load`.

    async def pause(self) -> None:
        """Stop the vCPUs; `continue_running` lets them run again."""

    async def switch_disk(self, overlay: Path) -> None:
        """From now on write the disk to `overlay`, a new qcow2 file whose backing file is the
        VM's current disk (which must stay at the path the VM opened it by: read-only from now,
        it is a layer under the overlay)."""

    async def stream_disk(self, base: Path) -> None:
        """Copy what the layers above `base` hold into the VM's own overlay and drop them from
        its chain (a live flatten: the overlay then stands on `base`)."""

    async def grow_disk(self, size_bytes: int) -> None:
        """Grow the running VM's disk to `size_bytes`; the guest is told its new capacity (its
        filesystem is grown by the caller, through the agent)."""


@dataclass(frozen=True)
class Capabilities:
    """What a driver's VMs can do. Disk layers, snapshots, pause and fork choose by these."""

    disk_formats: tuple[str, ...]  # what a VM's disk may be: ("qcow2", "raw"); layers need qcow2
    # switch_disk/stream_disk on a running VM (a running computer's snapshot, a live flatten)
    live_disk_switch: bool
    # save_state_live: a running VM's memory saved while its vCPUs run (a snapshot that does not
    # freeze the guest), its RAM in the stream (`split_saved_state`)
    live_memory_save: bool
    maps_read_only: bool  # maps a shared memory image copy-on-write from a read-only file (forks
    # share clean pages); if not, a shared image is copied into the VM's own RAM file
    snapshot_format: str  # the device-state format its save_state writes: "qemu-migration", ...
    confinement: str  # how its process is confined: "seccomp+uid+cgroups", "jailer", "none"
    seccomp: str | None  # its seccomp policy, in its own words; None: no filter
    disk_errors: str  # what a host-side disk error does to the guest
    disk_rate: str | None  # how it holds a VM to `VmSpec.disk_rate`, in its own words; None: not
    memory_overhead_mib: int  # held beyond guest RAM and a base overhead (TCG's code cache)
    # what each VM's hypervisor is estimated to hold beyond guest RAM (its heap, device state,
    # TCG's code cache): memory admission counts it for every running VM and each new one
    hypervisor_memory_mib: int
    agent_channel: str  # how the host reaches the guest agent: virtio-serial, vsock, unix


class Driver(Protocol):
    name: str  # the hypervisor: qemu, firecracker, local
    accel: str  # kvm, tcg, process
    run_files: tuple[str, ...]  # what a VM of it leaves in its run dir (sockets, pid): cleared

    @property
    def isolation(self) -> str:
        """What keeps a guest apart, as computers show it: qemu-kvm, qemu-tcg, firecracker-kvm."""
        ...

    @property
    def build(self) -> str:
        """The hypervisor's version: a saved state loads only into the build that wrote it."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def tools(self) -> dict[str, str]:
        """The programs it runs, each with the Debian package that has it (`sanbox doctor`)."""
        ...

    def is_vm_process(self, cmdline: str) -> bool:
        """Whether a process's command line is one of this driver's VMs (the stray sweep)."""
        ...

    async def boot(self, spec: VmSpec) -> VmHandle: ...

    def attach(self, run_dir: Path) -> VmHandle | None: ...
