"""A pause that writes only what the guest changed, for a VM resumed from its own saved memory.

Such a VM maps that file privately (`share=off`, copy-on-write): the pages its guest wrote since
are the QEMU process's anonymous pages, and every other page is still the file's. QEMU 7.2
cannot leave a private RAM block out of a migration stream, so a migration streams all of it
(seconds for 1 GiB: every untouched page is faulted in and looked at). Instead, with the vCPUs
stopped, the device state alone is saved (`xen-save-devices-state`: every section but RAM, into
a file the host opened and handed over in an fd set), and the written pages, found in the
process's page map (`/proc/PID/pagemap`: present or swapped, and not a file page), are read from
its memory (`/proc/PID/mem`) and written into the file at their offsets, run by run. The file
then holds the guest's RAM. Writing into it under the mapping changes nothing the guest sees:
only pages it holds copies of its own are written.

The device state gets the configuration section a migration stream starts with (the machine
type: the incoming side requires it); it has no ram section, so a load leaves the RAM as the
mapped file, as for a split stream (stream.py).

Only for the VM's own file: a regular file with one name, the QEMU process's user's, that the
process maps privately whole from offset 0 (its mapping found by device and inode). A shared
image (a snapshot's, mapped read-only) never qualifies, nor does any where the kernel does not
let the host read the page map: the caller takes the stream's way.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import VmmError
from . import state
from .qmp import Monitored, QmpClient, QmpError
from .stream import CONFIGURATION, MAGIC, PAGE_SHIFT, PAGE_SIZE, VERSION

RUN_BYTES = 8 << 20  # pages copied at most this much at a time (the copy's buffer)
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61
# a page map entry's top byte: 0x80 present, 0x40 swapped, 0x20 a file page (or shared)
_WRITTEN = bytes(1 if (b & 0x40) or (b & 0xA0) == 0x80 else 0 for b in range(256))
_RUNS = re.compile(b"\x01+")


@dataclass(frozen=True)
class Mapping:
    start: int  # the process's address of the file's first byte
    length: int


def mapping_of(maps: str, device: int, inode: int) -> Mapping | None:
    """The private mapping of the whole file (`device`, `inode`) from offset 0 in a
    /proc/PID/maps text, if there is exactly one. Pure."""
    found = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or int(fields[4]) != inode:
            continue
        major, minor = (int(x, 16) for x in fields[3].split(":"))
        if os.makedev(major, minor) != device:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if fields[1][3] != "p" or int(fields[2], 16) != 0:
            return None  # shared, or not from its start: not a resume's mapping
        found.append(Mapping(start, end - start))
    return found[0] if len(found) == 1 else None


def written_runs(pagemap: bytes) -> list[tuple[int, int]]:
    """(first page, pages) of each run of pages the process wrote, from its page map entries
    (little-endian u64s, one a page): present and not a file page, or swapped out. Pure."""
    top = pagemap[7::8].translate(_WRITTEN)
    return [(m.start(), m.end() - m.start()) for m in _RUNS.finditer(top)]


def configuration(machine_type: str) -> bytes:
    """A migration stream's header and configuration section for `machine_type` (no
    capabilities: the stream was not saved with x-ignore-shared). Pure."""
    name = machine_type.encode()
    return struct.pack(">IIBI", MAGIC, VERSION, CONFIGURATION, len(name)) + name


def with_configuration(devices: bytes, machine_type: str) -> bytes:
    """`xen-save-devices-state`'s output (a header, then sections) with the configuration
    section put after its header, as a migration stream has it. Pure."""
    if len(devices) < 8 or struct.unpack_from(">II", devices) != (MAGIC, VERSION):
        raise VmmError("QEMU's device state is not a migration stream")
    return configuration(machine_type) + devices[8:]


def own_file(memory_fd: int, pid: int) -> Mapping | None:
    """Where process `pid` maps the file open as `memory_fd`, if it is the process's own saved
    memory (above); None if not."""
    st = os.fstat(memory_fd)
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != owner:
        return None
    if owner == 0:  # a VM runs as a user of its own, never root
        return None
    mapping = mapping_of(maps, st.st_dev, st.st_ino)
    if mapping is None or mapping.length != st.st_size or not _page_map_readable(pid, mapping):
        return None
    return mapping


def _page_map_readable(pid: int, mapping: Mapping) -> bool:
    """Whether this kernel lets the host read the process's page map (its first entry)."""
    try:
        with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as f:
            return len(os.pread(f.fileno(), 8, (mapping.start >> PAGE_SHIFT) * 8)) == 8
    except OSError:
        return False


def copy_written(pid: int, mapping: Mapping, into_fd: int) -> list[tuple[int, int]]:
    """Write the pages process `pid` wrote in `mapping` into the file open as `into_fd`, at
    their offsets; the (start, end) byte ranges written."""
    pages = mapping.length >> PAGE_SHIFT
    with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as f:
        entries = os.pread(f.fileno(), pages * 8, (mapping.start >> PAGE_SHIFT) * 8)
    if len(entries) != pages * 8:
        raise VmmError("the VM's page map is shorter than its RAM")
    written = []
    mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        for first, count in written_runs(entries):
            offset, end = first * PAGE_SIZE, (first + count) * PAGE_SIZE
            written.append((offset, end))
            while offset < end:
                size = min(RUN_BYTES, end - offset)
                data = os.pread(mem, size, mapping.start + offset)
                if len(data) != size:
                    raise VmmError("the VM's memory could not be read whole")
                view = memoryview(data)
                while view:
                    view = view[os.pwrite(into_fd, view, offset + size - len(view)) :]
                offset += size
    finally:
        os.close(mem)
    return written


async def save_in_place(
    vm: Monitored, pid: int, vmstate: Path, memory_fd: int, into_fd: int | None = None
) -> list[tuple[int, int]] | None:
    """Stop the vCPUs, write the device state to `vmstate` and the pages the guest wrote into
    the file open as `into_fd` (by default the mapped file itself, `memory_fd`); the (start,
    end) byte ranges written. None, with nothing done, if the file open as `memory_fd` is not
    the VM's own saved memory (above). On failure the VM runs again."""
    mapping = own_file(memory_fd, pid)
    if mapping is None:
        return None
    async with state.saving(vm) as save:
        machine = str(await save.qmp.execute("qom-get", path="/machine", property="type"))
        machine = machine.removesuffix("-machine")
        await save.stop()
        devices = await _devices(save.qmp, vmstate)
        vmstate.write_bytes(with_configuration(devices, machine))
        os.chmod(vmstate, 0o600)
        written = copy_written(pid, mapping, memory_fd if into_fd is None else into_fd)
        if own_file(memory_fd, pid) != mapping:  # a dead process's page map reads as empty
            raise VmmError("the VM process ended while its memory was saved")
        return written


async def _devices(qmp: QmpClient, vmstate: Path) -> bytes:
    """QEMU's device state without RAM, written into `vmstate` (opened by the host, 0600, for
    writing only: an fd set's file must match the mode QEMU opens it with)."""
    fd = os.open(vmstate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        fdset = await qmp.add_fd(fd)
    finally:
        os.close(fd)
    try:
        await qmp.execute("xen-save-devices-state", filename=f"/dev/fdset/{fdset}", live=False)
    finally:
        with contextlib.suppress(QmpError):
            await qmp.execute("remove-fd", **{"fdset-id": fdset})
    return vmstate.read_bytes()
