"""The host's one door: every call the control plane makes of a machine layer, as one protocol.

`HostRuntime` (in process, this machine) is the implementation today; a host reached over the
network implements the same calls. The control plane holds a `Host`, never a `HostRuntime`, so
the type checker keeps it to these calls. What still crosses the door as a place on this machine
(`data_dir`: admission, image builds, template logs and caches; `network`: the egress gateway of
each computer) is named here too, so that what a remote host must still offer is written down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

# What crosses the door besides the calls: the values, errors and ports of the host's contract.
# The control plane imports these from here and nothing else of `sanbox.host`
# (tests/unit/test_host_door.py).
from . import console, faults, space
from .agent import (
    AgentClient,
    AgentError,
    AgentTimeoutError,
    AgentUnavailableError,
    CommandNotFoundError,
    ConnectionRefusedInGuestError,
    ExecProcess,
    ExecResult,
    Exit,
    FileInfo,
    FileNotFoundInGuestError,
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
from .disk import GIB, Disk, can_reflink
from .drivers import Capabilities, Liveness, VmHandle, VmNotRunningError
from .egress.budget import ConnectionBudget
from .egress.denials import Denial
from .egress.gateway import EgressGateway
from .egress.injection import FIELD_VALUE, FRAMING, Injection, applies
from .egress.org_ca import Minter, new_ca, upstream_context
from .egress.policy import Policy, PolicyError, parse_rule
from .egress.reach import Reach
from .egress.resolver import Resolver
from .errors import HostError, MissingToolError
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
from .layout import DataDir
from .machine import Machine, MachineSpec
from .memory import MemoryOutcome, PauseError, SavedState
from .net import Network
from .sealing import Sealer
from .snapshot import SnapshotManifest
from .space import Room

__all__ = [
    "FIELD_VALUE",
    "FRAMING",
    "GIB",
    "RECIPES",
    "AgentClient",
    "AgentError",
    "AgentTimeoutError",
    "AgentUnavailableError",
    "Capabilities",
    "CommandNotFoundError",
    "ConnectionBudget",
    "ConnectionRefusedInGuestError",
    "DataDir",
    "Denial",
    "Disk",
    "EgressGateway",
    "ExecProcess",
    "ExecResult",
    "Exit",
    "FileInfo",
    "FileNotFoundInGuestError",
    "Host",
    "HostError",
    "Image",
    "Injection",
    "InvalidPathError",
    "Kept",
    "KeptInfo",
    "Liveness",
    "Machine",
    "MachineSpec",
    "MemoryOutcome",
    "Minter",
    "MissingToolError",
    "Network",
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
    "space",
    "summary",
    "upstream_context",
]


class Host(Protocol):
    """One host: its computers' VMs, disks, saved memory and snapshots."""

    data_dir: DataDir
    network: Network | None

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

    async def pause(self, machine: Machine, spec: MachineSpec, image: Image) -> SavedState: ...

    async def resume(self, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]: ...

    def has_saved_memory(self, computer_id: str) -> bool: ...

    async def drop_saved_memory(self, computer_id: str) -> None: ...

    async def grow_disk(self, machine: Machine, size_bytes: int) -> None: ...

    def console_log(self, computer_id: str) -> Path:
        """The computer's serial console log (bounded by the host's sweep)."""
        ...

    def cpu_usec(self, computer_id: str) -> int | None:
        """CPU time the computer's VM has used (its cgroup), in µs; None where unmeasured."""
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
