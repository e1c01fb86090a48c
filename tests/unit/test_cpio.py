import io
import stat

import pytest

from sanbox.host.image.cpio import CpioWriter

pytestmark = pytest.mark.unit


def parse(blob: bytes) -> list[tuple[str, int, bytes]]:
    entries: list[tuple[str, int, bytes]] = []
    pos = 0
    while True:
        assert blob[pos : pos + 6] == b"070701"
        fields = [int(blob[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, filesize, namesize = fields[1], fields[6], fields[11]
        pos += 110
        name = blob[pos : pos + namesize - 1].decode()
        pos += namesize
        pos += -pos % 4
        data = blob[pos : pos + filesize]
        pos += filesize
        pos += -pos % 4
        if name == "TRAILER!!!":
            assert pos == len(blob)
            return entries
        entries.append((name, mode, data))


def test_roundtrip_of_dirs_files_and_links() -> None:
    sink = io.BytesIO()
    w = CpioWriter(sink)
    w.directory("bin")
    w.file("bin/busybox", b"\x7fELF" + b"x" * 5, 0o755)
    w.symlink("bin/sh", "busybox")
    w.file("init", b"#!/bin/sh\n", 0o755)
    w.close()
    entries = parse(sink.getvalue())
    assert [e[0] for e in entries] == ["bin", "bin/busybox", "bin/sh", "init"]
    assert stat.S_ISDIR(entries[0][1])
    assert stat.S_ISREG(entries[1][1]) and stat.S_IMODE(entries[1][1]) == 0o755
    assert entries[1][2] == b"\x7fELFxxxxx"
    assert stat.S_ISLNK(entries[2][1]) and entries[2][2] == b"busybox"
