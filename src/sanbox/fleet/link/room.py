"""A fleet host's own admission: before it makes a computer (a create, a copy, a fork) or brings
one back to RAM (a start, a resume), before it writes a pause's saved memory or takes a snapshot
(its new overlay: the control plane's copy of this host's room cannot leave the computer's own
promise out), and before it takes in what a move carries (a disk, a snapshot), the host agent
checks its filesystems as they are now and holds the room until the call ends, so calls placed
on one report's figures cannot together promise more than the host has; so does the sending
host before it writes the export a move carries (`exported`). No room is `host_full`
(HostFullError): the control plane then gives a new computer's placement back and tries another
host of its region (control/create.py); a move is refused, naming this host (control/moving.py).

The arithmetic is the single host's (`control/capacity.py`): RAM never overcommitted, each VM
counted with its hypervisor's overhead (in the room it reports too, so the control plane's copy
of it counts the same), thin disks up to `disk_overcommit` times the free space above the low
watermark."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ...control.capacity import DISK_LOW_WATERMARK, Capacity, Hold
from ...control.errors import InsufficientStorageError
from ...host.data.space import virtual_size
from ...host.door import GIB, HostError, HostFullError
from ...host.runtime import HostRuntime


class HostRoom:
    def __init__(
        self,
        runtime: HostRuntime,
        disk_overcommit: float = 1.0,
        disk_low_watermark: float | None = None,  # None: DISK_LOW_WATERMARK
    ) -> None:
        self.runtime = runtime
        watermark = DISK_LOW_WATERMARK if disk_low_watermark is None else disk_low_watermark
        self.capacity = Capacity.of_host(disk_overcommit, watermark)

    def kept_free(self) -> int:
        """Bytes of the data filesystem no new disk counts on (its report says, so placement
        counts the room this host's admission will)."""
        return self.capacity.kept_free(self.runtime.data_dir.root)

    def held(
        self, memory_mib: int, disk_gib: int = 0, computer_id: str | None = None, vms: int = 1
    ) -> contextlib.AbstractContextManager[None]:
        """Room for `memory_mib` of guest RAM (of `vms` VMs, each with its hypervisor's overhead)
        and a `disk_gib` disk, held while the block runs; HostFullError (nothing made) when it
        does not fit."""
        return _holding(
            lambda: self.capacity.admit_here(
                self.runtime, memory_mib, disk_gib, computer_id, vms=vms
            )
        )

    def carried(
        self, written_bytes: int, disk_gib: int = 0
    ) -> contextlib.AbstractContextManager[None]:
        """Room for what a move brings in from another host (`carry_routes.take`), held while it
        is taken: its files (`written_bytes`: a disk's qcow2 file, a snapshot's disk, device state
        and memory), written at once, so counted whole as saved memory is; and a moved disk's
        growth past what its file holds (`disk_gib`, its guest's size less that), promised as a
        new thin disk's is."""
        return _holding(
            lambda: self.capacity.admit_here(
                self.runtime, 0, disk_gib, None, carried_bytes=written_bytes
            )
        )

    def exported(self, written_bytes: int) -> contextlib.AbstractContextManager[None]:
        """Room for the files a move sends from here (`carry.export_bytes`: a copy of a disk with
        the layers under it folded in), held while they are made: written at once, so counted
        whole as saved memory is. Made, they stand on the filesystem its room measures until
        the move drops them."""
        return _holding(
            lambda: self.capacity.admit_here(self.runtime, 0, 0, None, export_bytes=written_bytes)
        )

    def paused(self, memory_mib: int) -> contextlib.AbstractContextManager[None]:
        """Room for a pause's saved memory, held while it is written (`Capacity.admit_pause`)."""
        return _holding(lambda: self.capacity.admit_pause(self.runtime, memory_mib))

    def snapshot(
        self, computer_id: str, disk_gib: int, memory_mib: int
    ) -> contextlib.AbstractContextManager[None]:
        """Room for a snapshot of `computer_id`: its new overlay and its memory, if kept
        (`Capacity.admit_snapshot`, its own promise left out), held while it is taken. No
        `disk_gib` (a build computer's spec names none: its image's size) is its disk's own."""
        disk_gib = disk_gib or self._disk_gib(computer_id)
        return _holding(
            lambda: self.capacity.admit_snapshot(self.runtime, computer_id, disk_gib, memory_mib)
        )

    def _disk_gib(self, computer_id: str) -> int:
        """The size of the computer's disk here, in GiB rounded up (0: it has none)."""
        try:
            size = virtual_size(self.runtime.data_dir.computer(computer_id).disk)
        except (OSError, HostError):
            return 0
        return -(-size // GIB)


@contextlib.contextmanager
def _holding(admit: Callable[[], Hold]) -> Iterator[None]:
    """What `admit` holds, held while the block runs; its refusal as HostFullError."""
    try:
        hold = admit()
    except InsufficientStorageError as exc:
        raise HostFullError(f"{exc.code}: {exc.message}") from exc
    with hold:
        yield
