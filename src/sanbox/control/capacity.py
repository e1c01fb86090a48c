"""What this host has, and whether a computer's resources fit in it.

Admission (`admit`, pure) refuses a create, start or resume before anything is made when the
guest's RAM and its hypervisor's own memory would not fit in the shared-memory filesystem
(`insufficient_memory`, 507) or its new disk would not fit on the data filesystem
(`insufficient_storage`, 507), counting what running guests' RAM files and existing disks may
still grow by and what every running VM's hypervisor holds (`host/data/space.py` measures that).
The RAM dir's size is the budget for guests' RAM and their hypervisors together: a hypervisor's
memory (QEMU's heap, TCG's code cache) is outside it, where its free space does not show it, so
each is counted whole as promised, at its driver's estimate (or the operator's,
SANBOX_VM_OVERHEAD_MIB). An org's memory quota counts the guest RAM it asked for, not this.
What a pause or a snapshot writes there is admitted the same way before it is written
(`admit_pause`, `admit_snapshot`; a fork's snapshot too, a template build's): a pause's saved
memory (up to the guest's RAM size), and a snapshot's new overlay, promised the disk's full size
again (its old one, frozen as a layer, grows no more), with its memory when asked. What a move
carries in is admitted by the fleet host that takes it (`fleet/link/room.py` `HostRoom.carried`):
its files, written at once, whole; a disk's growth past its file as a thin disk's promise.
Otherwise a full filesystem surfaces later, inside a running guest, as a disk or memory error.

An admitted operation holds its room (`Hold`) until its files exist and are measured, so ten
creates (or pauses, or snapshots) admitted at once cannot together promise more than there is.
Disks are thin: an operator may let their virtual sizes add up to `disk_overcommit` times the
free space (default 1: a guest that fills its disk, or fills it, snapshots and fills it again, or
fills its RAM and pauses, can never fill the host's and stop its neighbours). Saved memory is
written at once, so it counts whole, never overcommitted. An overcommitting host keeps a low
watermark, `disk_low_watermark` percent of the data filesystem (default 10): nothing admitted
counts on that space, so it stays for what grows there uncounted (image builds, fetched
packages) and for the disks' own growth; once it is gone no disk, saved memory or snapshot is
added at all. If the disks still fill the filesystem, each guest whose write finds no space is
stopped by QEMU at that write (`werror=stop`) and its computer goes to `error` with the reason,
its disk consistent as of the stop; the others run on, and each starts again once there is
room (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..host.door import Host, Room
from .errors import InsufficientStorageError, InvalidRequestError

MIB = 1024 * 1024
GIB = 1024 * MIB
DISK_LOW_WATERMARK = 10.0  # % of the data filesystem an overcommitting host keeps free


def _mib(n: int) -> str:
    return f"{max(0, n) // MIB} MiB"


def admit(
    memory_bytes: int,
    ram: Room,
    disk_bytes: int = 0,
    data: Room | None = None,
    overcommit: float = 1.0,
    reserve: int = 0,
    saved_bytes: int = 0,
    vms: int = 1,
    copy_bytes: int = 0,
    carried_bytes: int = 0,
    export_bytes: int = 0,
) -> None:
    """Refuse (InsufficientStorageError) unless the RAM with its `vms` hypervisors (`ram.overhead`
    each), the new disk, the saved memory, a flat copy of a disk's layers, files carried in
    from another host and an export to send to one fit in what is spare; disks' promised growth
    counts at 1/`overcommit`, saved memory, the copy and the files carried or sent (written at
    once) whole, against the free space above `reserve` (the low watermark: bytes of the data
    filesystem nothing admitted may count on). No RAM asked (a pause, a snapshot, a move): none
    checked."""
    overhead = ram.overhead * vms
    if memory_bytes > 0 and memory_bytes + overhead > ram.spare:
        raise InsufficientStorageError(
            _no_memory(memory_bytes, ram, overhead, vms), "insufficient_memory"
        )
    written = saved_bytes + copy_bytes + carried_bytes + export_bytes
    if data is None or (disk_bytes <= 0 and written <= 0):
        return
    if written + (disk_bytes + data.promised) / overcommit > data.free - reserve:
        thin = f" (disks may add up to {overcommit:g}x the free space" if overcommit > 1 else ""
        if thin:
            thin += f" above {_mib(reserve)} kept free)" if reserve else ")"
        parts = [f"a {_mib(disk_bytes)} disk"] if disk_bytes > 0 else []
        parts += [f"{_mib(saved_bytes)} of saved memory"] if saved_bytes > 0 else []
        parts += [f"a {_mib(copy_bytes)} flat copy of its disk's layers"] if copy_bytes > 0 else []
        parts += [f"{_mib(carried_bytes)} carried from another host"] if carried_bytes > 0 else []
        parts += [f"a {_mib(export_bytes)} copy to send to another host"] if export_bytes else []
        fit = "do not fit" if len(parts) > 1 else "does not fit"
        smaller = (
            ", ask for a smaller disk" if saved_bytes + carried_bytes + export_bytes <= 0 else ""
        )
        raise InsufficientStorageError(
            f"{' and '.join(parts)} {fit} on the data filesystem ({data.path}): "
            f"{_mib(data.free)} free, {_mib(data.promised)} promised to existing disks as they "
            f"fill{thin}. Delete computers or snapshots{smaller}, or free space",
            "insufficient_storage",
        )


def _no_memory(memory_bytes: int, ram: Room, overhead: int, vms: int) -> str:
    """Why `memory_bytes` of guest memory and `overhead` for its `vms` hypervisors do not fit."""
    what = f"{_mib(memory_bytes)} of guest memory does not fit"
    promised, budget = "memory", ""
    if overhead > 0:
        theirs = "its hypervisor" if vms == 1 else f"their {vms} hypervisors"
        which = f" ({ram.hypervisor})" if ram.hypervisor else ""
        what = f"{_mib(memory_bytes)} of guest memory and {_mib(overhead)} for {theirs}{which}"
        what += " do not fit"
        promised = "memory and hypervisors"
        budget = " (its size is the budget for guests' memory and their hypervisors)"
    return (
        f"{what} in {ram.path}: {_mib(ram.free)} free, {_mib(ram.promised)} of it promised to "
        f"running computers' {promised}. Stop or pause a computer, ask for less memory, or "
        f"grow {ram.path}{budget}"
    )


def low_watermark(path: Path, percent: float) -> int:
    """`percent` of the filesystem at `path`, in bytes: what overcommitted admission keeps free."""
    st = os.statvfs(path)
    return int(st.f_blocks * st.f_frsize * percent / 100)


class Hold:
    """Room an admitted operation will take, counted against later admissions until released
    (idempotent; a context manager releases on exit)."""

    def __init__(
        self, ledger: Ledger, key: int, memory_bytes: int, disk_bytes: int, saved_bytes: int = 0
    ) -> None:
        self._ledger, self._key = ledger, key
        self.memory_bytes, self.disk_bytes, self.saved_bytes = memory_bytes, disk_bytes, saved_bytes

    def release(self) -> None:
        self._ledger.release(self._key)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class Ledger:
    """The holds of operations admitted but not finished: guest RAM (with its hypervisors'
    overhead), disks' promises, and saved memory (or a flat copy of a disk's layers) about to be
    written to the data filesystem."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._held: dict[int, tuple[int, int, int]] = {}

    def hold(self, memory_bytes: int, disk_bytes: int, saved_bytes: int = 0) -> Hold:
        with self._lock:
            key = next(self._keys)
            self._held[key] = (memory_bytes, disk_bytes, saved_bytes)
        return Hold(self, key, memory_bytes, disk_bytes, saved_bytes)

    def release(self, key: int) -> None:
        with self._lock:
            self._held.pop(key, None)

    def totals(self) -> tuple[int, int, int]:
        """Held guest RAM (and its hypervisors'), disks' promises and saved memory, in bytes."""
        with self._lock:
            held = list(self._held.values())
        return sum(h[0] for h in held), sum(h[1] for h in held), sum(h[2] for h in held)


def host_memory_mib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


@dataclass(frozen=True)
class Capacity:
    cpus: int
    memory_mib: int
    disk_overcommit: float = 1.0  # virtual disk bytes allowed per free byte (>= 1)
    # % of the data filesystem an overcommitting host keeps free: no new disk counts on it
    disk_low_watermark: float = DISK_LOW_WATERMARK
    ledger: Ledger = field(default_factory=Ledger, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.disk_overcommit >= 1.0:
            raise ValueError("disk_overcommit is 1 (no overcommit) or more")
        if not 0 <= self.disk_low_watermark < 100:
            raise ValueError("disk_low_watermark is a percentage, 0 or more and under 100")

    @classmethod
    def of_host(
        cls, disk_overcommit: float = 1.0, disk_low_watermark: float = DISK_LOW_WATERMARK
    ) -> Capacity:
        return cls(os.cpu_count() or 1, host_memory_mib(), disk_overcommit, disk_low_watermark)

    def check(self, vcpus: int, memory_mib: int) -> None:
        if vcpus > self.cpus:
            raise InvalidRequestError(
                f"{vcpus} vCPUs is more than this host has ({self.cpus}): ask for at most "
                f"{self.cpus}",
                "insufficient_resources",
            )
        if memory_mib > self.memory_mib:
            raise InvalidRequestError(
                f"{memory_mib} MiB of memory is more than this host has ({self.memory_mib} MiB)",
                "insufficient_resources",
            )

    def kept_free(self, data_path: Path) -> int:
        """Bytes of the data filesystem no new disk counts on: the low watermark, kept by a host
        that overcommits (one that does not counts every disk at its full size already)."""
        if self.disk_overcommit <= 1:
            return 0
        return low_watermark(data_path, self.disk_low_watermark)

    def admit_here(
        self,
        host: Host,
        memory_mib: int,
        disk_gib: int = 0,
        computer_id: str | None = None,
        saved_mib: int = 0,
        vms: int = 1,
        copy_bytes: int = 0,
        carried_bytes: int = 0,
        export_bytes: int = 0,
    ) -> Hold:
        """`admit` on the host's filesystems as they are now, counting what other admitted
        operations hold (`computer_id`'s own files are not counted against it), with the host's
        own overcommit and watermark (a fleet host's, as it reports them; this server's, its
        settings); the room it takes, held until the caller releases it. `memory_mib`: the guest
        RAM of the `vms` VMs it starts, each held with its hypervisor's overhead (the host's
        room says how much). `saved_mib`: memory it writes to the data filesystem (held saved
        memory counts as space already taken); `copy_bytes`: a flat copy of a disk's layers it
        writes there, `carried_bytes`: files a move brings in from another host, and
        `export_bytes`: the files a move sends from here, each held as saved memory is."""
        held_memory, held_disk, held_saved = self.ledger.totals()
        written = copy_bytes + carried_bytes + export_bytes
        ram, room = host.room(computer_id, disk=bool(disk_gib or saved_mib or written))
        ram = replace(ram, promised=ram.promised + held_memory)
        data = None
        if room is not None:
            data = Room(room.path, room.free - held_saved, room.promised + held_disk)
        own = host.admission()
        if own is not None:  # a fleet host's, as it admits
            overcommit, reserve = own
        else:
            overcommit = self.disk_overcommit
            reserve = 0 if data is None else self.kept_free(data.path)
        memory, saved = memory_mib * MIB, saved_mib * MIB
        disk = disk_gib * GIB
        at_once = (copy_bytes, carried_bytes, export_bytes)
        admit(memory, ram, disk, data, overcommit, reserve, saved, vms, *at_once)
        if memory > 0:
            memory += ram.overhead * vms
        return self.ledger.hold(memory, disk, saved + written)

    def admit_pause(self, host: Host, memory_mib: int) -> Hold:
        """Room on the data filesystem for a pause's saved memory before it is written: up to the
        guest's RAM size (`host/saved/memory.py` writes its RAM file, or the pages it took out of
        the migration stream or wrote since its resume, into the computer's state dir), beside
        every disk's promise, the pausing computer's own too (its disk stays, and may fill once
        it is resumed: a resume admits its RAM, not its disk again)."""
        return self.admit_here(host, 0, 0, None, saved_mib=memory_mib)

    def admit_snapshot(
        self, host: Host, computer_id: str, disk_gib: int, memory_mib: int = 0
    ) -> Hold:
        """Room on the data filesystem for a snapshot (a fork's too) before anything is taken:
        the computer goes on on a new overlay promised its disk's full size (its current disk,
        frozen as the snapshot's layer, grows no more: its own promise is not counted), and with
        memory (`memory_mib`) the snapshot keeps its saved RAM. A disk whose layer would make
        chains too deep is flattened: that flat copy is written at once (`Host.flat_copy_bytes`),
        so it counts whole, as saved memory does. A fleet host's room is its report's, which
        cannot leave one computer's promise out: there the new overlay and any flat copy are
        admitted by the host agent itself (`fleet/link/room.py` `HostRoom.snapshot`), only the
        memory here."""
        flat = 0
        if host.admission() is not None:
            disk_gib = 0
        else:
            flat = host.flat_copy_bytes(computer_id)
        return self.admit_here(host, 0, disk_gib, computer_id, memory_mib, copy_bytes=flat)
