"""Guest RAM taken out of a QEMU migration stream: the pages of the RAM block go into a sparse
memory file, everything else (device state, firmware pages) stays in the stream, and a stream that
is not understood is refused instead of saved half-read."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from sanbox.host.drivers.qemu import stream as memstream
from sanbox.host.drivers.qemu.stream import (
    CONTINUE,
    EOS,
    MEM_SIZE,
    PAGE,
    PAGE_SIZE,
    ZERO,
    StreamError,
)

pytestmark = pytest.mark.unit
RAM = 64 * PAGE_SIZE
BIOS = 4 * PAGE_SIZE
HEADER = struct.pack(">II", memstream.MAGIC, memstream.VERSION)
CONFIG = (
    bytes([memstream.CONFIGURATION])
    + struct.pack(">I", 7)
    + b"microvm"
    + bytes([memstream.SUBSECTION, 26])
    + b"configuration/capabilities"
    + struct.pack(">II", 1, 1)
    + bytes([15])
    + b"x-ignore-shared"
)
DEVICES = bytes([0x04]) + struct.pack(">I", 3) + b"\x06serial" + os.urandom(300) + b"\x00"


def record(offset: int, flags: int, block: str | None = None, body: bytes = b"") -> bytes:
    ident = b"" if block is None else bytes([len(block)]) + block.encode()
    return struct.pack(">Q", offset | flags) + ident + body


def page(offset: int, block: str | None, fill: int) -> bytes:
    flags = PAGE | (CONTINUE if block is None else 0)
    return record(offset, flags, block, bytes([fill]) * PAGE_SIZE)


def zero(offset: int, block: str | None, fill: int = 0) -> bytes:
    return record(offset, ZERO | (CONTINUE if block is None else 0), block, bytes([fill]))


def section(kind: int, sid: int, body: bytes, name: str = "") -> bytes:
    head = bytes([kind]) + struct.pack(">I", sid)
    if kind == memstream.SECTION_START:
        head += bytes([len(name)]) + name.encode() + struct.pack(">II", 0, 4)
    return head + body + struct.pack(">Q", EOS) + bytes([memstream.FOOTER]) + struct.pack(">I", sid)


LIVE_CONFIG = bytes([memstream.CONFIGURATION]) + struct.pack(">I", 7) + b"microvm"


def block_list(ram: int = RAM, addresses: bool = True) -> bytes:
    """The block list; a stream saved without x-ignore-shared gives no guest addresses."""
    blocks = [("pc.bios", BIOS, 0xFFFC0000), ("ram", ram, 0)]
    body = b"".join(
        bytes([len(n)])
        + n.encode()
        + struct.pack(">Q", size)
        + (struct.pack(">Q", addr) if addresses else b"")
        for n, size, addr in blocks
    )
    return record(BIOS + ram, MEM_SIZE) + body


def stream(*parts: bytes, live: bool = False) -> bytes:
    start = section(memstream.SECTION_START, 2, block_list(addresses=not live), "ram")
    return HEADER + (LIVE_CONFIG if live else CONFIG) + start + b"".join(parts) + DEVICES


def split(tmp_path: Path, data: bytes) -> tuple[bytes, bytes, int]:
    (tmp_path / "stream").write_bytes(data)
    pages = memstream.split(tmp_path / "stream", tmp_path / "devices", tmp_path / "memory", RAM)
    return (tmp_path / "devices").read_bytes(), (tmp_path / "memory").read_bytes(), pages


def test_ram_pages_go_to_the_memory_file_and_the_rest_stays(tmp_path: Path) -> None:
    bios = page(0, "pc.bios", 0xB1) + page(PAGE_SIZE, None, 0xB2)
    part = (
        page(0, "ram", 1)
        + page(PAGE_SIZE, None, 2)
        + zero(2 * PAGE_SIZE, None)
        + bios
        + zero(3 * PAGE_SIZE, "ram", 7)
        + page(10 * PAGE_SIZE, None, 9)
    )
    end = page(PAGE_SIZE, "ram", 0) + zero(0, None)  # sent again: now zero
    parts = section(memstream.SECTION_PART, 2, part), section(memstream.SECTION_END, 2, end)
    devices, ram, pages = split(tmp_path, stream(*parts))
    assert len(ram) == RAM and pages == 6
    assert ram[: 2 * PAGE_SIZE] == bytes(2 * PAGE_SIZE)  # both rewritten as zero at the end
    assert ram[3 * PAGE_SIZE : 4 * PAGE_SIZE] == b"\x07" * PAGE_SIZE
    assert ram[10 * PAGE_SIZE : 11 * PAGE_SIZE] == b"\x09" * PAGE_SIZE
    assert ram.count(0) == RAM - 2 * PAGE_SIZE
    assert devices == stream(
        section(memstream.SECTION_PART, 2, bios), section(memstream.SECTION_END, 2, b"")
    )
    assert os.stat(tmp_path / "memory").st_blocks * 512 < RAM  # zero pages stay holes


def test_a_command_between_the_parts_stays_and_the_last_part_is_split(tmp_path: Path) -> None:
    """QEMU 10 sends a command (its switchover start: 11, no data) before the ram section's END."""
    command = bytes([memstream.COMMAND]) + struct.pack(">HH", 11, 0)
    part = section(memstream.SECTION_PART, 2, page(0, "ram", 1))
    end = section(
        memstream.SECTION_END, 2, zero(PAGE_SIZE, "ram", 5) + page(8 * PAGE_SIZE, None, 6)
    )
    devices, ram, pages = split(tmp_path, stream(part, command, end))
    assert pages == 3
    assert ram[PAGE_SIZE : 2 * PAGE_SIZE] == b"\x05" * PAGE_SIZE
    assert ram[8 * PAGE_SIZE : 9 * PAGE_SIZE] == b"\x06" * PAGE_SIZE
    empty = section(memstream.SECTION_PART, 2, b""), section(memstream.SECTION_END, 2, b"")
    assert devices == stream(empty[0], command, empty[1])


def test_a_split_stream_has_no_ram_pages_left(tmp_path: Path) -> None:
    devices, _, _ = split(tmp_path, stream(section(memstream.SECTION_PART, 2, page(0, "ram", 5))))
    again = tmp_path / "again"
    again.mkdir()
    assert split(again, devices)[2] == 0


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (page(RAM, "ram", 1), "outside the guest's RAM"),
        (page(0, None, 1), "continues no block"),
        (record(0, 0x40, "ram", b"x"), "unsupported page record flags"),
        (page(0, "ram", 1)[:-1], "ends early"),
    ],
)
def test_a_stream_not_understood_is_refused(tmp_path: Path, part: bytes, said: str) -> None:
    body = bytes([memstream.SECTION_PART]) + struct.pack(">I", 2) + part
    data = HEADER + CONFIG + section(memstream.SECTION_START, 2, block_list(), "ram") + body
    with pytest.raises(StreamError, match=said):
        split(tmp_path, data)


def test_another_iterative_section_or_ram_size_is_refused(tmp_path: Path) -> None:
    other = HEADER + CONFIG + section(memstream.SECTION_START, 3, b"", "block")
    with pytest.raises(StreamError, match="other than ram"):
        split(tmp_path, other)
    bigger = HEADER + CONFIG + section(memstream.SECTION_START, 2, block_list(2 * RAM), "ram")
    with pytest.raises(StreamError, match="ram block is"):
        split(tmp_path, bigger + DEVICES)
    with pytest.raises(StreamError, match="not a QEMU migration stream"):
        split(tmp_path, b"QEVX" + bytes(100))


def test_a_page_sent_again_as_zero_within_a_run_of_zero_pages_is_zeroed(tmp_path: Path) -> None:
    """A second pass over dirty pages: runs of zero records are skipped fast, but never over a
    page written before, which must read zero now."""
    first = page(5 * PAGE_SIZE, "ram", 1) + page(30 * PAGE_SIZE, None, 2)
    zeros = zero(0, "ram") + b"".join(zero(i * PAGE_SIZE, None) for i in range(1, 10))
    scattered = b"".join(zero(i * PAGE_SIZE, None) for i in (20, 22, 21, 30))
    _, ram, _ = split(
        tmp_path, stream(section(memstream.SECTION_PART, 2, first + zeros + scattered))
    )
    assert ram == bytes(RAM)


def test_a_live_saved_stream_splits_and_says_how_it_loads(tmp_path: Path) -> None:
    """A live save (x-ignore-shared off: no capability listed, a block list without guest
    addresses) passes over the RAM several times; the last content of each page is kept, and
    its device stream says it must be loaded without x-ignore-shared."""
    passes = [
        section(memstream.SECTION_PART, 2, page(0, "ram", 1) + page(PAGE_SIZE, None, 2)),
        section(memstream.SECTION_PART, 2, page(PAGE_SIZE, "ram", 3)),
        section(memstream.SECTION_END, 2, zero(0, "ram")),
    ]
    devices, ram, _ = split(tmp_path, stream(*passes, live=True))
    assert ram[:PAGE_SIZE] == bytes(PAGE_SIZE)
    assert ram[PAGE_SIZE : 2 * PAGE_SIZE] == bytes([3]) * PAGE_SIZE
    assert devices.endswith(DEVICES)
    (tmp_path / "devices-live").write_bytes(devices)
    assert memstream.ignores_shared(tmp_path / "devices-live") is False
    assert memstream.ignores_shared(tmp_path / "stream") is False
    (tmp_path / "shared").write_bytes(stream())
    assert memstream.ignores_shared(tmp_path / "shared") is True
