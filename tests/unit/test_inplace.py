"""The pure parts of a pause in place: finding a VM's mapping of its own memory file, the runs of
pages it wrote (from page map entries), the header a device-only state gets, the rest
of a mapped file copied beside what a snapshot wrote, and the setting that keeps the stream's
way."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from sanbox.host.disk.clone import copy_extents_but
from sanbox.host.drivers.errors import VmmError
from sanbox.host.drivers.qemu import inplace
from sanbox.host.drivers.qemu.stream import CONFIGURATION, MAGIC, VERSION
from sanbox.host.settings import HostSettings, SettingsError

DEV = os.makedev(0xFE, 0)
MAPS = """\
55d0c0000000-55d0c0100000 r-xp 00000000 fe:00 1111 /usr/bin/qemu-system-x86_64
7f0000000000-7f0040000000 rw-p 00000000 fe:00 4242 /data/computers/c/run/memory.mapped
7f0050000000-7f0050001000 rw-p 00000000 00:00 0
"""
PRESENT, SWAPPED, FILE = 1 << 63, 1 << 62, 1 << 61


def test_the_private_mapping_of_the_whole_file_is_found() -> None:
    found = inplace.mapping_of(MAPS, DEV, 4242)
    assert found == inplace.Mapping(0x7F0000000000, 0x40000000)
    assert inplace.mapping_of(MAPS, DEV, 9999) is None  # another file
    assert inplace.mapping_of(MAPS, os.makedev(8, 1), 4242) is None  # another device


@pytest.mark.parametrize(
    "line",
    [
        "7f0000000000-7f0040000000 rw-s 00000000 fe:00 4242 /m",  # shared: not a resume's
        "7f0000000000-7f0040000000 rw-p 00001000 fe:00 4242 /m",  # not from its start
    ],
)
def test_a_shared_or_offset_mapping_does_not_qualify(line: str) -> None:
    assert inplace.mapping_of(line, DEV, 4242) is None


def test_two_mappings_of_the_file_do_not_qualify() -> None:
    twice = MAPS + "7f0060000000-7f00a0000000 rw-p 00000000 fe:00 4242 /m\n"
    assert inplace.mapping_of(twice, DEV, 4242) is None


def entries(*values: int) -> bytes:
    return b"".join(struct.pack("<Q", v) for v in values)


def test_written_pages_are_anonymous_present_or_swapped_in_runs() -> None:
    pagemap = entries(
        0,  # never touched: the file's
        PRESENT | FILE | 77,  # read: the file's page
        PRESENT | 5,  # written (copy-on-write): anonymous
        PRESENT | 6,
        SWAPPED | 3,  # written, then swapped out
        PRESENT | FILE,
        PRESENT | 9,
    )
    assert inplace.written_runs(pagemap) == [(2, 3), (6, 1)]
    assert inplace.written_runs(entries(0, 0, PRESENT | FILE)) == []


def test_the_device_state_gets_a_configuration_section_after_its_header() -> None:
    devices = struct.pack(">II", MAGIC, VERSION) + b"\x04sections"
    stream = inplace.with_configuration(devices, "microvm")
    head = struct.pack(">IIBI", MAGIC, VERSION, CONFIGURATION, 7) + b"microvm"
    assert stream == head + b"\x04sections"
    with pytest.raises(VmmError, match="not a migration stream"):
        inplace.with_configuration(b"garbage!", "microvm")


def test_the_pause_way_is_a_setting() -> None:
    assert HostSettings.from_env({}).pause == "in-place"
    assert HostSettings.from_env({"SANBOX_PAUSE": "Stream"}).pause == "stream"
    with pytest.raises(SettingsError, match="SANBOX_PAUSE='sideways' is not one of"):
        HostSettings.from_env({"SANBOX_PAUSE": "sideways"})


def test_the_rest_of_a_mapped_file_is_copied_beside_what_was_written(tmp_path: Path) -> None:
    """`copy_extents_but`: the source's data, holes kept, but where the target holds its own."""
    page = 4096
    src, dst = tmp_path / "mapped", tmp_path / "new"
    with open(src, "wb") as f:
        f.truncate(16 * page)
        for n in (1, 2, 3, 8, 9):  # data in pages 1-3 and 8-9, holes elsewhere
            f.seek(n * page)
            f.write(bytes([n]) * page)
    with open(dst, "wb") as f:
        f.truncate(16 * page)
        f.seek(2 * page)
        f.write(b"w" * page)  # written since: page 2, and page 8
        f.seek(8 * page)
        f.write(b"v" * page)
    written = [(2 * page, 3 * page), (8 * page, 9 * page)]
    with open(src, "rb") as s, open(dst, "r+b") as d:
        copy_extents_but(s.fileno(), d.fileno(), 16 * page, written)
    got = dst.read_bytes()
    want = {1: b"\x01", 2: b"w", 3: b"\x03", 8: b"v", 9: b"\t"}
    for n in range(16):
        assert got[n * page : (n + 1) * page] == want.get(n, b"\x00") * page, n
