"""A running Firecracker VM (`VmHandle`): liveness by pid and command line, the rest through its
API socket. What `attach` needs is kept in the run dir (`firecracker.vm`): the VM id, the host's
paths of its sockets, disk and memory file, and its jail root when the jailer started it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import process
from . import api
from ._contract import Liveness, VmmError, VmNotRunningError
from .api import FirecrackerApi
from .config import AGENT_VSOCK_PORT
from .errors import FirecrackerApiError, FirecrackerConfigError, NotSupportedError
from .jail import jailed_paths, on_host
from .vsock import open_channel

RECORD = "firecracker.vm"
ISOLATION = "firecracker-kvm"


@dataclass(frozen=True)
class VmRecord:
    """What a new caller needs to reach a VM again (host paths throughout)."""

    pid: int
    vm_id: str
    api_socket: str
    vsock: str
    disk: str
    memory: str | None = None  # the saved memory a `restore=True` VM loads (mapped privately)
    tap: str | None = None
    jail: str | None = None  # the chroot's root, if the jailer started it
    owner: tuple[int, int] | None = None  # the jailed VM user's (uid, gid)

    def dumps(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> VmRecord:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
            raise ValueError("not a Firecracker VM record")
        if doc.get("owner") is not None:
            doc["owner"] = tuple(doc["owner"])
        return cls(**doc)


def memory_of(vmstate: Path) -> Path:
    """Where a saved state's guest RAM is: a file beside it. Pure."""
    return vmstate.with_name(vmstate.name + ".mem")


def liveness(
    pid: int, vm_id: str, read: Callable[[int], tuple[bytes, str]] = process.read_proc
) -> Liveness:
    """Whether `pid` is this VM's live Firecracker: its command line has `--id <vm_id>` (the
    jailer hands Firecracker the same `--id`), which guards against pid reuse."""
    return process.liveness(pid, f"\0--id\0{vm_id}\0".encode(), read)


class FirecrackerVm(process.DetachedVm):
    """A Firecracker process running one computer (waited for and killed as every detached VM
    is; alive by its `--id`)."""

    def __init__(self, record: VmRecord, run_dir: Path) -> None:
        super().__init__(record.pid, run_dir, ISOLATION)
        self.record = record
        self.api = FirecrackerApi(Path(record.api_socket))

    async def open_agent(
        self, timeout: float = 5.0
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to the guest agent: the vsock handshake on `agent_socket`."""
        return await open_channel(Path(self.record.vsock), AGENT_VSOCK_PORT, timeout)

    def liveness(self) -> Liveness:
        return liveness(self.pid, self.record.vm_id)

    async def _send(self, call: api.ApiCall, timeout: float | None = None) -> object:
        if not self.alive():
            raise VmNotRunningError(f"VM process {self.pid} is gone")
        return await self.api.send(call, timeout)

    async def state(self) -> str:
        """`Not started`, `Running` or `Paused` (InstanceInfo.state)."""
        info = await self._send(api.instance_info(), timeout=5.0)
        state = info.get("state") if isinstance(info, dict) else None
        if not isinstance(state, str):
            raise FirecrackerApiError(f"GET / answered {info!r:.200}")
        return state

    async def frozen(self) -> bool | None:
        try:
            return await self.state() == "Paused"
        except VmmError:
            return None

    async def disk_error(self) -> str | None:
        """Firecracker hands a disk error to the guest (an I/O error there) instead of stopping
        it, so there is never a stopped guest to report: None."""
        return None

    async def pause(self) -> None:
        await self._send(api.pause())

    async def continue_running(self) -> None:
        await self._send(api.resume())

    async def save_state(self, vmstate: Path) -> bool:
        """Pause, then a full snapshot: the device state to `vmstate`, guest RAM beside it
        (`memory_of(vmstate)`); True: the RAM is saved with the state, not in a shared file.
        On failure the VM runs again."""
        await self.pause()
        try:
            if self.record.jail is None:
                await self._send(api.create_snapshot(vmstate, memory_of(vmstate)), 300.0)
                return True
            inside = jailed_paths().config.with_name("snapshot")
            root = Path(self.record.jail)
            await self._send(api.create_snapshot(inside, memory_of(inside)), 300.0)
            await asyncio.to_thread(shutil.move, on_host(root, inside), vmstate)
            await asyncio.to_thread(
                shutil.move, on_host(root, memory_of(inside)), memory_of(vmstate)
            )
            return True
        except BaseException:
            with contextlib.suppress(VmmError):
                await self.continue_running()
            raise

    async def save_state_in_place(
        self, vmstate: Path, memory_fd: int, into_fd: int | None = None
    ) -> list[tuple[int, int]] | None:
        return None  # its snapshots write the whole memory file (diff snapshots: not yet)

    async def save_state_live(self, vmstate: Path, at_stop: Callable[[], Awaitable[None]]) -> float:
        raise NotSupportedError(
            "a live memory save is not supported by firecracker yet: its diff snapshots (dirty "
            "pages since the last) would be the way; its vCPUs pause for a full snapshot"
        )

    def split_saved_state(
        self, saved: Path, vmstate: Path, memory: Path, memory_bytes: int
    ) -> None:
        """Firecracker wrote the RAM beside the state already (`save_state`): both are moved
        into place (nothing to parse)."""
        os.replace(saved, vmstate)
        os.replace(memory_of(saved), memory)

    async def load_state(self, vmstate: Path) -> None:
        """`PUT /snapshot/load` into this fresh (`restore=True`) process: the memory file mapped
        privately, the vsock and tap moved to this VM's, then it runs."""
        memory = Path(self.record.memory) if self.record.memory else memory_of(vmstate)
        vsock, snapshot = Path(self.record.vsock), vmstate
        if self.record.jail is not None:
            root, inside = Path(self.record.jail), jailed_paths()
            snapshot, vsock = inside.config.with_name("snapshot"), inside.vsock
            owner = self.record.owner
            await asyncio.to_thread(_into_jail, vmstate, on_host(root, snapshot), owner, True)
            await asyncio.to_thread(_into_jail, memory, on_host(root, memory_of(snapshot)), owner)
            memory = memory_of(snapshot)
        taps = (("net0", self.record.tap),) if self.record.tap else ()
        await self._send(api.load_snapshot(snapshot, memory, True, vsock, taps), 120.0)

    async def quit(self) -> None:
        """Firecracker has no quit call: the process is ended (SIGTERM, then SIGKILL)."""
        await self.kill()

    async def switch_disk(self, overlay: Path) -> None:
        raise NotSupportedError(
            "a live disk switch is not supported by firecracker: it attaches raw disks only, "
            "with no overlays (a snapshot of its disk is a reflink or a copy)"
        )

    async def stream_disk(self, base: Path) -> None:
        raise NotSupportedError(
            "a live disk flatten is not supported by firecracker: its disks are raw, with no "
            "layers to stream"
        )

    async def grow_disk(self, size_bytes: int) -> None:
        """Grow the raw file, then `PATCH /drives/root` with its path: Firecracker reads the new
        size and tells the guest."""
        disk = Path(self.record.disk)
        if size_bytes < disk.stat().st_size:
            raise FirecrackerConfigError(f"a disk is grown, not shrunk ({size_bytes} bytes)")
        await asyncio.to_thread(os.truncate, disk, size_bytes)
        inside = disk if self.record.jail is None else jailed_paths().disk
        await self._send(api.update_drive("root", inside))


def _into_jail(
    source: Path, target: Path, owner: tuple[int, int] | None, copy: bool = False
) -> None:
    """A saved file into the jail, readable by the VM user. The device state (small, and maybe
    a snapshot's that other VMs restore too) is copied; the memory file is linked: it is this
    VM's own (the driver does not map a shared image: `maps_read_only` is False, so the caller
    gives each VM its own copy or reflink), and copied only across filesystems."""
    target.unlink(missing_ok=True)
    try:
        if copy:
            raise OSError("copy")
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    if owner is not None:
        os.chown(target, *owner)
