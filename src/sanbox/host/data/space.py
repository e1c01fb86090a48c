"""How much room this host's filesystems have for computers: the shared-memory filesystem that
holds running guests' RAM files (its size is the budget for guests' RAM, also of those resumed
from mapped saved memory, and for their hypervisors' own memory), and the data filesystem that
holds their disks.

Both kinds of file are sparse and grow as guests use them, so free space alone overstates the
room: a `Room` also counts what files already made may still grow by (a RAM file up to its size;
a disk up to its virtual size), and the RAM dir's what every running VM's hypervisor holds
beside it (memory its free space does not show). Admission (`control/capacity.py`) does the
arithmetic.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import LayoutError
from ..saved.mapped_memory import MAPPED
from .layout import DataDir

QCOW2_MAGIC = b"QFI\xfb"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Room:
    path: Path  # the filesystem's place, for messages
    free: int  # bytes an unprivileged writer may still take (the VM user writes these files)
    promised: int  # bytes existing sparse files may still grow by (the RAM dir's: and hypervisors)
    # the RAM dir's only: bytes counted for a new VM's hypervisor beside its guest RAM, and which
    # hypervisor that is (for messages: its isolation, `qemu-tcg`)
    overhead: int = 0
    hypervisor: str = ""

    @property
    def spare(self) -> int:
        return self.free - self.promised


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _allocated(st: os.stat_result) -> int:
    return st.st_blocks * 512


def virtual_size(path: Path) -> int:
    """A disk's size as its guest sees it: a qcow2 file's header says it; raw is its length."""
    with open(path, "rb") as f:
        header = f.read(32)
        if header[:4] == QCOW2_MAGIC and len(header) == 32:
            return int(struct.unpack(">Q", header[24:32])[0])
        return os.fstat(f.fileno()).st_size


def ram_room(
    ram_dir: Path,
    exclude: str | None = None,
    data_dir: DataDir | None = None,
    overhead: int = 0,
    hypervisor: str = "",
) -> Room:
    """The RAM dir's room: running guests' RAM files (any data dir's) may grow to their size.
    A guest resumed from saved memory (`data_dir`'s) has no RAM file there: it maps the saved
    file privately, and its RAM becomes the host's memory as it writes it, up to its size. Each
    running VM has a hypervisor holding `overhead` bytes beyond its guest RAM, outside the RAM
    dir: counted for each RAM file (another host agent's on this machine too: a shared RAM dir
    is one budget) and for each running VM of `data_dir` that has none. The RAM dir is the budget
    for guests' RAM and their hypervisors, so those are promised against it too, and a new VM is
    counted `overhead` (the Room says it)."""
    promised, files = 0, set()
    for f in ram_dir.glob("sanbox-*.ram"):
        if exclude is not None and f.name.endswith(f"-{exclude}.ram"):
            continue
        try:
            st = f.stat()
        except OSError:
            continue
        promised += max(0, st.st_size - _allocated(st)) + overhead
        files.add(f.name)
    if data_dir is not None:
        for computer_id, run in _running(data_dir, exclude):
            mapped = data_dir.ram_file(computer_id).name not in files  # its RAM: the saved file
            promised += (overhead + _mapped(run)) if mapped else 0
    return Room(ram_dir, _free(ram_dir), promised, overhead, hypervisor)


def _running(data_dir: DataDir, exclude: str | None) -> list[tuple[str, Path]]:
    """The ids and run dirs of `data_dir`'s running VMs: those whose `vm.pid` names a live
    process (a pidfile left by a VM that ended without us, e.g. at a host reboot, names none)."""
    found = []
    for computer_id in data_dir.computer_ids():
        if computer_id == exclude:
            continue
        try:
            run = data_dir.computer(computer_id).run
            pid = int((run / "vm.pid").read_text().strip())
        except (OSError, ValueError, LayoutError):
            continue
        if Path(f"/proc/{pid}").exists():
            found.append((computer_id, run))
    return found


def _mapped(run: Path) -> int:
    """The size of the saved memory a running VM maps privately from its run dir; 0: none."""
    try:
        return (run / MAPPED).stat().st_size
    except OSError:
        return 0


def disk_room(data_dir: DataDir, exclude: str | None = None) -> Room:
    """The data filesystem's room: every computer's disk may grow to its virtual size."""
    promised = 0
    for computer_id in data_dir.computer_ids():
        if computer_id == exclude:
            continue
        try:
            disk = data_dir.computer(computer_id).disk
            size = virtual_size(disk)
            promised += max(0, size - _allocated(disk.stat()))
        except (OSError, LayoutError):
            continue
    return Room(data_dir.root, _free(data_dir.root), promised)
