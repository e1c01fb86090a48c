"""The host's one door: every call the control plane makes of a machine layer, as one protocol.

`HostRuntime` (in process, this machine) is the implementation today; a host reached over the
network implements the same calls. The control plane holds a `Host`, never a `HostRuntime`, so
the type checker keeps it to these calls, all by computer id and values: no path or part of this
machine crosses it, so a host reached over the network can offer the same.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from .agent import (
    AgentClient,
    AgentError,
    AgentRouteError,
    AgentTimeoutError,
    AgentUnavailableError,
    CommandNotFoundError,
    ConnectionRefusedInGuestError,
    DirWatch,
    ExecProcess,
    ExecResult,
    Exit,
    FileInfo,
    FileNotFoundInGuestError,
    FsEvent,
    InvalidPathError,
    Kept,
    KeptInfo,
    PtySession,
    RemoteError,
    Stderr,
    Stdout,
    TcpStream,
)
from .agent.files import Source
from .data.layout import ComputerDir
from .data.space import Room
from .disk import GIB, Disk, can_reflink
from .disk.errors import DiskDamagedError
from .disk.transfer import DiskExport
from .drivers import Capabilities, Liveness, VmHandle, VmNotRunningError
from .egress.budget import ConnectionBudget
from .egress.computers import ComputersEgress, EgressControl
from .egress.denials import Denial
from .egress.gateway import Intercepts, OnDenied, OrgOf
from .egress.injection import FIELD_VALUE, FRAMING, Injection, applies
from .egress.interception import Handover
from .egress.leak_scan import MIN_FORM
from .egress.org_ca import Minter, new_ca, upstream_context
from .egress.policy import Policy, PolicyError, parse_rule
from .egress.reach import Reach
from .egress.resolver import Resolver
from .errors import HostError, HostFullError, MissingToolError
from .image import (
    RECIPES,
    Image,
    allocated_bytes,
    find_build,
    find_image,
    is_current,
    list_builds,
    recipe_for,
    remove_build,
)
from .image.archive import summary
from .keys.sealing import Sealer

# What crosses the door besides the calls: the values, errors and ports of the host's contract.
# The control plane imports these from here and nothing else of `sanbox.host`
# (tests/unit/test_host_door.py).
from .machines import console, faults
from .machines.machine import Machine, MachineSpec
from .saved.memory import MemoryOutcome, PauseError, SavedState
from .snapshot import SnapshotManifest
from .snapshot.transfer import SnapshotExport

__all__ = [
    "FIELD_VALUE",
    "FRAMING",
    "GIB",
    "MIN_FORM",
    "RECIPES",
    "AgentClient",
    "AgentError",
    "AgentRouteError",
    "AgentTimeoutError",
    "AgentUnavailableError",
    "Capabilities",
    "CommandNotFoundError",
    "ConnectionBudget",
    "ConnectionRefusedInGuestError",
    "Denial",
    "DirWatch",
    "Disk",
    "DiskDamagedError",
    "DiskExport",
    "ComputerDir",
    "ComputersEgress",
    "EgressControl",
    "Handover",
    "ExecProcess",
    "ExecResult",
    "Exit",
    "FileInfo",
    "FileNotFoundInGuestError",
    "FsEvent",
    "Host",
    "HostError",
    "HostFullError",
    "Image",
    "Injection",
    "Intercepts",
    "InvalidPathError",
    "Kept",
    "KeptInfo",
    "Liveness",
    "Machine",
    "MachineSpec",
    "MemoryOutcome",
    "Minter",
    "MissingToolError",
    "OnDenied",
    "OrgOf",
    "PauseError",
    "Policy",
    "PolicyError",
    "PtySession",
    "Reach",
    "RemoteError",
    "Resolver",
    "Room",
    "SavedState",
    "Sealer",
    "SnapshotExport",
    "SnapshotManifest",
    "Source",
    "Stderr",
    "Stdout",
    "TcpStream",
    "VmHandle",
    "VmNotRunningError",
    "allocated_bytes",
    "applies",
    "can_reflink",
    "console",
    "faults",
    "find_build",
    "find_image",
    "is_current",
    "list_builds",
    "new_ca",
    "parse_rule",
    "recipe_for",
    "remove_build",
    "summary",
    "upstream_context",
]


class Host(Protocol):
    """One host: its computers' VMs, disks, saved memory and snapshots."""

    # what this host is --------------------------------------------------------------------

    def driver_facts(self) -> tuple[str, str]:
        """(hypervisor, isolation) as computers and the host show them."""
        ...

    def capabilities(self) -> Capabilities:
        """What its driver can do (snapshots of running VMs, memory, disk formats, ...)."""
        ...

    def confinement(self) -> dict[str, object]:
        """What confines this host's VMs (seccomp, user, cgroup controllers, disk errors)."""
        ...

    def open_egress(
        self,
        resolver: Resolver,
        on_denied: OnDenied,
        reach: Reach,
        max_connections: int,
        intercepts: Intercepts,
        budget: ConnectionBudget,
        org_of: OrgOf,
    ) -> EgressControl | None:
        """Its computers' egress (firewall, DNS filter, proxies) driven by computer id, with
        the control plane's parts; None where the host makes no network of its own."""
        ...

    def storage(self) -> tuple[str, bool]:
        """Where it keeps computers (its data dir) and whether that filesystem reflinks."""
        ...

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        """Room for guests' RAM and (with `disk`) for disks, as the filesystems are now, counting
        what files already made may still grow by (`computer_id`'s own not counted)."""
        ...

    def admission(self) -> tuple[float, int] | None:
        """A fleet host's own admission of thin disks (its overcommit, and the bytes its low
        watermark keeps free), as it reports them; None for this server's own host, which the
        server's settings admit."""
        ...

    def flat_copy_bytes(self, computer_id: str) -> int:
        """Bytes a snapshot of `computer_id` writes beside its new overlay: a flat copy of its
        disk's layers when the layer its disk becomes would make chains too deep (at most its
        disk's size); 0 when it would not, and on a fleet host, whose agent admits it itself."""
        ...

    # images -------------------------------------------------------------------------------

    def image(self, template: str, build_id: str | None = None) -> Image:
        """A template's build: `build_id`'s if it is still there, else the current one."""
        ...

    def build(self, build_id: str) -> Image:
        """The build `build_id`, whatever its template (ImageNotFoundError otherwise)."""
        ...

    def builds(self) -> list[Image]:
        """Every image build on this host, by template, oldest first."""
        ...

    def remove_build(self, image: Image) -> None:
        """Delete a build (the caller checked nothing stands on it)."""
        ...

    # a computer's VM ----------------------------------------------------------------------

    async def create(self, spec: MachineSpec, image: Image) -> tuple[Machine, Disk]: ...

    async def start(self, spec: MachineSpec, image: Image) -> Machine: ...

    async def attach(self, computer_id: str, timeout: float = 10.0) -> Machine | None: ...

    def attach_vm(self, computer_id: str) -> VmHandle | None:
        """The computer's running VM process, if any (no agent connection)."""
        ...

    async def shutdown(self, machine: Machine, timeout: float = ...) -> bool: ...

    async def kill(self, computer_id: str) -> None: ...

    async def destroy(self, computer_id: str) -> None: ...

    async def quarantine(self, computer_id: str) -> str:
        """Kill its VM if it runs and set its folder aside, disks kept (a computer the control
        plane does not place on this host: docs/fleet.md); where it went, for the log."""
        ...

    async def pause(self, machine: Machine, spec: MachineSpec, image: Image) -> SavedState: ...

    async def resume(self, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]: ...

    def has_saved_memory(self, computer_id: str) -> bool: ...

    async def drop_saved_memory(self, computer_id: str) -> None: ...

    async def grow_disk(self, machine: Machine, size_bytes: int) -> None: ...

    async def console_lines(self, computer_id: str, count: int) -> list[str]:
        """The last `count` non-empty lines of the computer's serial console (a log bounded by
        the host's sweep)."""
        ...

    def cpu_usec(self, computer_id: str) -> int | None:
        """CPU time the computer's VM has used (its cgroup), in µs; None where unmeasured."""
        ...

    # a stopped computer's disk, or a snapshot, to another host (`sanbox move`) -------------

    async def export_disk(self, computer_id: str, image: Image) -> DiskExport:
        """Make the file that carries the stopped computer's disk (disk/transfer.py)."""
        ...

    async def export_snapshot(self, snapshot_id: str, image: Image) -> SnapshotExport:
        """Check a snapshot and make the files that carry it (snapshot/transfer.py)."""
        ...

    def export_chunks(self, item_id: str, name: str) -> AsyncGenerator[bytes, None]:
        """The bytes of one file an export made (`disk.qcow2`, `vmstate`, `memory`); the caller
        closes it (`contextlib.aclosing`), so a stream cut short ends at once."""
        ...

    async def drop_export(self, item_id: str) -> None: ...

    async def import_disk(
        self,
        computer_id: str,
        export: DiskExport,
        image: Image | None,
        chunks: AsyncIterator[bytes],
    ) -> None:
        """Make the computer's folder here from the bytes of an export, checked (its size,
        SHA-256, format and `image`'s rootfs under it), or nothing."""
        ...

    async def import_snapshot(
        self, snapshot_id: str, export: SnapshotExport, image: Image, chunks: AsyncIterator[bytes]
    ) -> SnapshotManifest:
        """Make the snapshot here from the bytes of its export's files (in order), checked and
        sealed under this host's key, or nothing."""
        ...

    # snapshots, copies and forks ------------------------------------------------------------

    async def snapshot(
        self,
        snapshot_id: str,
        computer_id: str,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        memory: bool = False,
        live: bool = True,
    ) -> SnapshotManifest: ...

    async def create_from_snapshot(
        self, spec: MachineSpec, image: Image, snapshot_id: str
    ) -> tuple[Machine, MemoryOutcome | None]: ...

    async def fork(
        self,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        new_specs: list[MachineSpec],
        memory: bool = True,
    ) -> list[Machine]: ...

    async def finish_copy(self, machine: Machine, hostname: str, size_bytes: int) -> None: ...

    def snapshot_ids(self) -> list[str]: ...

    async def delete_snapshot(self, snapshot_id: str) -> None: ...

    async def delete_snapshots(self, snapshot_ids: list[str]) -> int: ...

    async def snapshot_layers(self, snapshot_ids: list[str]) -> dict[str, list[str]]: ...

    async def gc_layers(self) -> list[str]: ...

    # housekeeping ----------------------------------------------------------------------------

    async def sweep(self, known: set[str]) -> list[str]:
        """Remove what belongs to no computer in `known` (the caller's records): folders,
        network namespaces, cgroups, stray VM processes. Returns what went."""
        ...
