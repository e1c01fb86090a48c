"""Guest RAM taken out of a QEMU 7.2 migration stream.

A VM that runs from privately mapped saved memory (`share=off`) has RAM that `x-ignore-shared`
does not skip: its migration stream carries every page. `split` reads such a stream, writes the
pages of the guest's RAM block into a sparse memory file (zero pages stay holes) and copies the
rest, the device state and the pages of other blocks (firmware), into a device stream that loads
into a VM whose RAM is that memory file again. The result is the same pair a shared-RAM pause
makes: a device stream and a RAM file.

The format (QEMU's migration/savevm.c and ram.c): a header (magic, version), a configuration
section, then the iterative "ram" section in parts (START, PART..., END), each a list of records
`be64 offset|flags` ended by EOS and followed by a section footer, with commands between them
(QEMU 10 sends its switchover start before the last part), kept as they are; after it, the
device sections, copied as they are. Anything not understood raises `StreamError`: the pause is
refused, never saved half-understood. Pure of side effects but for the two files written;
unit-tested.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import SavedStateError

MAGIC = 0x5145564D  # "QEVM"
VERSION = 3
SECTION_START, SECTION_PART, SECTION_END = 0x01, 0x02, 0x03
SUBSECTION, CONFIGURATION, COMMAND, FOOTER = 0x05, 0x07, 0x08, 0x7E
PAGE_SHIFT = 12  # x86 target pages: 4 KiB
PAGE_SIZE = 1 << PAGE_SHIFT
ZERO, MEM_SIZE, PAGE, EOS, CONTINUE = 0x02, 0x04, 0x08, 0x10, 0x20
FLAG_MASK = PAGE_SIZE - 1
RUN_LIMIT = 4 * 1024 * 1024  # pages gathered before one write
_BE64 = struct.Struct(">Q")
IOV_MAX = 1024


def _pwritev(fd: int, iov: list[memoryview], offset: int) -> None:
    """Write the pages of `iov` at `offset`, one after another."""
    if not iov:
        return
    done = os.pwritev(fd, iov, offset)
    rest = b"".join(iov)[done:] if done < len(iov) * PAGE_SIZE else b""  # short: rare
    while rest:
        n = os.pwrite(fd, rest, offset + done)
        done, rest = done + n, rest[n:]


# a record of a zero page that continues its block: be64 offset|ZERO|CONTINUE, fill byte 0
_ZERO_RECORDS = re.compile(b"(?:.{6}[" + bytes(range(0, 256, 16)) + b"]\x22\x00)+", re.DOTALL)
_ZERO_RECORD = struct.Struct(">Qx")


def _zero_run(data: memoryview, pos: int, offset: int, ram: _RamWriter) -> tuple[int, int]:
    """A run of zero-page records at `pos` for consecutive pages from `offset`, none written
    before, all inside RAM (matched and compared in C): (its end, pos). Otherwise (pos, the end
    of the records that look like zero records): those are looked at one by one."""
    match = _ZERO_RECORDS.match(data, pos)
    if match is None:
        return pos, pos + 9
    count = (match.end() - pos) // 9
    end = offset + count * PAGE_SIZE
    if end > ram.size or ram.written.find(1, offset >> PAGE_SHIFT, end >> PAGE_SHIFT) != -1:
        return pos, match.end()
    expected = b"".join(map(_ZERO_RECORD.pack, range(offset | ZERO | CONTINUE, end, PAGE_SIZE)))
    if data[pos : match.end()] != expected:
        return pos, match.end()
    return match.end(), pos


class StreamError(SavedStateError):
    """A migration stream this module does not understand."""


@dataclass
class _Cursor:
    data: memoryview
    pos: int = 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise StreamError(f"the stream ends early, at {len(self.data)}")
        view = self.data[self.pos : self.pos + n]
        self.pos += n
        return view

    def u8(self) -> int:
        return self.take(1)[0]

    def be16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def be32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def be64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def idstr(self) -> str:
        return bytes(self.take(self.u8())).decode("latin-1")

    def peek(self) -> int:
        if self.pos >= len(self.data):
            raise StreamError("the stream ends early")
        return self.data[self.pos]


class _RamWriter:
    """Pages of the RAM block into the memory file, consecutive pages written together."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self.written = bytearray(size // PAGE_SIZE)  # 1 where a non-zero page was written
        self.run = bytearray()
        self.run_start = 0
        self.pages = 0

    def page(self, offset: int, data: memoryview | bytes) -> None:
        if offset % PAGE_SIZE or offset + PAGE_SIZE > self.size:
            raise StreamError(f"a page at {offset} lies outside the guest's RAM")
        if self.run and offset == self.run_start + len(self.run) and len(self.run) < RUN_LIMIT:
            self.run += data
        else:
            self.flush()
            self.run_start, self.run = offset, bytearray(data)
        self.written[offset // PAGE_SIZE] = 1
        self.pages += 1

    def zero(self, offset: int, fill: int) -> None:
        if fill:
            self.page(offset, bytes([fill]) * PAGE_SIZE)
        elif 0 <= offset < self.size and self.written[offset // PAGE_SIZE]:
            self.page(offset, bytes(PAGE_SIZE))  # sent again as zero: it was not before

    def flush(self) -> None:
        done = 0
        while done < len(self.run):
            done += os.pwrite(self.fd, memoryview(self.run)[done:], self.run_start + done)
        self.run = bytearray()


@dataclass
class _Splitter:
    src: _Cursor
    out: bytearray
    ram: _RamWriter
    block: str  # the RAM block's id, e.g. "ram"
    last_block: str | None = None  # what a CONTINUE record refers to (kept across sections)
    kept_from: int = 0  # start of the source bytes not yet copied to `out`
    ignore_shared: bool = False  # saved with x-ignore-shared: the block list has addresses

    def keep_until(self, end: int) -> None:
        self.out += self.src.data[self.kept_from : end]
        self.kept_from = end

    def drop_until(self, end: int) -> None:
        self.kept_from = end

    def header(self) -> None:
        if self.src.be32() != MAGIC or self.src.be32() != VERSION:
            raise StreamError("not a QEMU migration stream (magic or version)")
        if self.src.peek() == CONFIGURATION:
            self.src.u8()
            self.src.take(self.src.be32())  # the machine type's name
            while self.src.peek() == SUBSECTION:
                self.src.u8()
                name = self.src.idstr()
                self.src.be32()  # version
                if name == "configuration/capabilities":
                    for _ in range(self.src.be32()):
                        if self.src.idstr() == "x-ignore-shared":
                            self.ignore_shared = True
                elif name == "configuration/target-page-bits":
                    self.src.be32()
                elif name == "configuration/uuid":
                    self.src.take(16)
                else:
                    raise StreamError(f"unknown configuration subsection {name!r}")

    def sections(self) -> None:
        """The ram section's parts and the commands between them (kept: `be16 command, be16
        length, data`); stops at the first other section (the devices)."""
        ram_section: int | None = None
        while self.src.peek() in (SECTION_START, SECTION_PART, SECTION_END, COMMAND):
            kind = self.src.u8()
            if kind == COMMAND:
                self.src.be16()
                self.src.take(self.src.be16())
                continue
            section = self.src.be32()
            if kind == SECTION_START:
                name = self.src.idstr()
                self.src.take(8)  # instance, version
                if name != "ram":
                    raise StreamError(f"an iterative section other than ram: {name!r}")
                ram_section = section
            elif section != ram_section:
                raise StreamError(f"a part of an unknown section {section}")
            self.records()
            if self.src.peek() == FOOTER:
                self.src.u8()
                if self.src.be32() != section:
                    raise StreamError("a section footer that does not match its section")
        if ram_section is None:
            raise StreamError("the stream has no ram section")

    def fast_records(self) -> None:
        """The common case, fast: a run of our block's records with CONTINUE, zero pages not
        written before (they stay holes) and pages (written with one pwritev per run of
        consecutive offsets, straight from the stream's mapping). The run is dropped from the
        device stream; anything else is left to `records`."""
        data, pos, ram = self.src.data, self.src.pos, self.ram
        first, last, unpack = pos, len(data) - 9, _BE64.unpack_from
        iov: list[memoryview] = []
        run_start = expect = -1
        one_by_one = 0  # before this position, zero records are looked at one by one
        ram.flush()  # pending pages go first: a page sent twice keeps its later content
        while pos <= last:
            word = unpack(data, pos)[0]
            kind, offset = word & FLAG_MASK, word & ~FLAG_MASK
            if offset >= ram.size:
                break
            if kind == ZERO | CONTINUE and not data[pos + 8]:
                if pos >= one_by_one:
                    pos, one_by_one = _zero_run(data, pos, offset, ram)
                    continue
                if ram.written[offset >> PAGE_SHIFT]:
                    break
                pos += 9
                continue
            if kind != PAGE | CONTINUE or pos + 8 + PAGE_SIZE > len(data):
                break
            if offset != expect or len(iov) == IOV_MAX:
                _pwritev(ram.fd, iov, run_start)
                iov, run_start = [], offset
            iov.append(data[pos + 8 : pos + 8 + PAGE_SIZE])
            ram.written[offset >> PAGE_SHIFT] = 1
            ram.pages += 1
            expect = offset + PAGE_SIZE
            pos += 8 + PAGE_SIZE
        _pwritev(ram.fd, iov, run_start)
        if pos != first:
            self.keep_until(first)
            self.drop_until(pos)
            self.src.pos = pos

    def records(self) -> None:
        while True:
            if self.last_block == self.block:
                self.fast_records()
            start = self.src.pos
            word = self.src.be64()
            flags, offset = word & FLAG_MASK, word & ~FLAG_MASK
            if flags & EOS:
                if flags != EOS:
                    raise StreamError(f"unexpected flags {flags:#x} with EOS")
                return
            if flags & MEM_SIZE:
                self.block_list(offset)
                continue
            if not flags & CONTINUE:
                self.last_block = self.src.idstr()
            elif self.last_block is None:
                raise StreamError("a record continues no block")
            ours = self.last_block == self.block
            if flags & ~CONTINUE == ZERO:
                fill = self.src.u8()
                if ours:
                    self.keep_until(start)
                    self.ram.zero(offset, fill)
                    self.drop_until(self.src.pos)
            elif flags & ~CONTINUE == PAGE:
                data = self.src.take(PAGE_SIZE)
                if ours:
                    self.keep_until(start)
                    self.ram.page(offset, data)
                    self.drop_until(self.src.pos)
            else:
                raise StreamError(f"unsupported page record flags {flags:#x}")

    def block_list(self, total: int) -> None:
        """MEM_SIZE: every RAM block with its length and (x-ignore-shared) guest address."""
        seen = 0
        while seen < total:
            name = self.src.idstr()
            length = self.src.be64()
            if self.ignore_shared:
                self.src.be64()  # the block's guest address
            if name == self.block and length != self.ram.size:
                raise StreamError(f"the ram block is {length} bytes, not {self.ram.size}")
            seen += length
        if seen != total:
            raise StreamError("the RAM block list does not add up")


HEADER_BYTES = 64 * 1024  # more than a stream's header and configuration section take


def ignores_shared(stream: Path) -> bool:
    """Whether `stream` was saved with `x-ignore-shared` (its configuration section lists it):
    a load must set the same."""
    with open(stream, "rb") as f:
        head = f.read(HEADER_BYTES)
    splitter = _Splitter(_Cursor(memoryview(head)), bytearray(), _RamWriter(-1, 0), "ram")
    splitter.header()
    return splitter.ignore_shared


def split(stream: Path, devices: Path, memory: Path, size: int, block: str = "ram") -> int:
    """Write `devices` (the stream without `block`'s pages) and `memory` (a sparse file of
    `size` bytes holding them, mode 0600). Returns the number of pages written to it."""
    fd = os.open(memory, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, size)
        with open(stream, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise StreamError("the stream is empty")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mm)
        try:
            splitter = _Splitter(_Cursor(view), bytearray(), _RamWriter(fd, size), block)
            splitter.header()
            splitter.sections()
            splitter.keep_until(len(view))
            splitter.ram.flush()
            out = splitter.out
        finally:
            view.release()
            with contextlib.suppress(BufferError):  # an error's traceback holds slices of it:
                mm.close()  # then it is closed when they are gone
        with open(devices, "wb") as dst:
            dst.write(out)
        return splitter.ram.pages
    finally:
        os.close(fd)
