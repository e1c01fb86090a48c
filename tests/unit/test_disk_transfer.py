"""A moving disk's file (host/disk/transfer.py) with real qcow2 files: made from an overlay chain
with its layers folded in, taken on another "host" whose copy of the build is elsewhere, and
refused whole when a byte changed, more came than announced, the header names an external data
file or the build under it is not the same. A moving snapshot's files (host/snapshot/transfer.py)
split from one stream as announced, zero pages left as holes, a changed byte refused."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from sanbox.host.disk import qcow2
from sanbox.host.disk.errors import DiskDamagedError
from sanbox.host.disk.transfer import DiskExport, Receiver, chunks, export
from sanbox.host.image import Image
from sanbox.host.snapshot.transfer import SnapshotExport, Taker

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")
MIB = 1 << 20


def _image(root: Path, build_id: str = "b1") -> Image:
    root.mkdir(parents=True)
    with open(root / "rootfs.raw", "wb") as f:
        f.write(b"\x11" * MIB)
        f.truncate(64 * MIB)
    return Image("base", build_id, root, "test", 1)


def _io(path: Path, command: str) -> None:
    argv = ["qemu-io", "-f", "qcow2", "-c", command, str(path)]
    subprocess.run(argv, check=True, capture_output=True)


def _chain(tmp: Path, image: Image) -> Path:
    """rootfs <- layer (a write) <- top (another write): a snapshotted computer's disk."""
    layer, top = tmp / "layer.qcow2", tmp / "top.qcow2"
    qcow2.create_overlay(image.rootfs, layer, 64 * MIB)
    _io(layer, "write -P 0xaa 4M 1M")
    qcow2.create_overlay(layer, top, 64 * MIB)
    _io(top, "write -P 0xbb 8M 1M")
    return top


def _take(e: DiskExport, sent: Path, dest: Path, image: Image | None, flip: bool = False) -> None:
    receiver = Receiver(e, dest)
    try:
        for i, data in enumerate(chunks(sent)):
            receiver.write(bytes([data[0] ^ 1]) + data[1:] if flip and i == 0 else data)
        receiver.finish(image)
    finally:
        receiver.close()


def test_a_disk_crosses_with_its_layers_and_reads_the_same(tmp_path: Path) -> None:
    here, there = _image(tmp_path / "a" / "img"), _image(tmp_path / "b" / "img")
    top = _chain(tmp_path / "a", here)
    made = export(top, here, tmp_path / "a" / "export.qcow2")
    assert made.backed and made.virtual_size == 64 * MIB
    assert qcow2.backing_of(tmp_path / "a" / "export.qcow2") == here.rootfs.resolve()
    taken = tmp_path / "b" / "disk.qcow2"
    _take(made, tmp_path / "a" / "export.qcow2", taken, there)
    assert qcow2.backing_of(taken) == there.rootfs
    same = subprocess.run(["qemu-img", "compare", str(top), str(taken)], capture_output=True)
    assert same.returncode == 0, same.stdout


def test_a_damaged_longer_or_strange_disk_is_refused(tmp_path: Path) -> None:
    here, there = _image(tmp_path / "a" / "img"), _image(tmp_path / "b" / "img")
    sent = tmp_path / "a" / "export.qcow2"
    made = export(_chain(tmp_path / "a", here), here, sent)
    dest = tmp_path / "b"

    with pytest.raises(DiskDamagedError, match="damaged"):
        _take(made, sent, dest / "flipped.qcow2", there, flip=True)
    short = DiskExport(**{**made.out(), "size": made.size - 1})
    with pytest.raises(DiskDamagedError, match="longer"):
        _take(short, sent, dest / "long.qcow2", there)
    other = _image(tmp_path / "c" / "img", build_id="b2")
    with pytest.raises(DiskDamagedError, match="build b1"):
        _take(made, sent, dest / "other.qcow2", other)

    strange = tmp_path / "a" / "strange.qcow2"
    shutil.copy(sent, strange)
    with open(strange, "r+b") as f:  # incompatible feature bit 2: an external data file
        f.seek(72)
        bits = int.from_bytes(f.read(8), "big") | 4
        f.seek(72)
        f.write(bits.to_bytes(8, "big"))
    e = DiskExport(**{**made.out(), "sha256": _sha(strange)})
    with pytest.raises(DiskDamagedError, match="plain qcow2"):
        _take(e, strange, dest / "strange.qcow2", there)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_snapshots_files_are_split_as_announced_zeros_left_as_holes(tmp_path: Path) -> None:
    disk, vmstate, ram = b"disk" * 1000, b"", b"\x07" + bytes(4 * MIB) + b"\x09"
    files = [
        {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in (("disk.qcow2", disk), ("vmstate", vmstate), ("memory", ram))
    ]
    e = SnapshotExport(snapshot={}, saved={}, files=files, build_id="b1", rootfs_size=1)
    taker = Taker(e, tmp_path / "snap")
    stream = disk + vmstate + ram
    for at in range(0, len(stream), 777_777):  # pieces that straddle the files' ends
        taker.write(stream[at : at + 777_777])
    taker.close()
    assert (tmp_path / "snap" / "disk.qcow2").read_bytes() == disk
    assert (tmp_path / "snap" / "memory" / "vmstate").read_bytes() == b""
    memory = tmp_path / "snap" / "memory" / "memory"
    assert memory.read_bytes() == ram
    assert memory.stat().st_blocks * 512 < 2 * MIB, "its zeros were written, not left as holes"
    with pytest.raises(DiskDamagedError, match="more bytes"):
        taker.write(b"x")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("piece", [MIB, 777_777, 3 * MIB])
def test_a_file_that_ends_in_zeros_ends_and_the_next_one_starts(tmp_path: Path, piece: int) -> None:
    """A file whose last piece is zeros (a guest's top pages unused; the stream cut on the
    file's end or not) ends there like any other: the next file takes what follows, and the
    last one ends too."""
    disk, state, ram = b"disk" * 1000, b"\x07" + bytes(2 * MIB - 1), b"\x05" * 10 + bytes(MIB)
    files = [
        {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in (("disk.qcow2", disk), ("vmstate", state), ("memory", ram))
    ]
    taker = Taker(SnapshotExport({}, {}, files, "b1", 1), tmp_path / "snap")
    stream = disk + state + ram
    for at in range(0, len(disk), piece):
        taker.write(stream[at : min(at + piece, len(disk))])
    for at in range(len(disk), len(stream), piece):
        taker.write(stream[at : at + piece])
    taker.close()
    assert (tmp_path / "snap" / "memory" / "vmstate").read_bytes() == state
    assert (tmp_path / "snap" / "memory" / "memory").read_bytes() == ram
    with pytest.raises(DiskDamagedError, match="more bytes"):  # every file ended
        taker.write(b"x")


def test_a_snapshot_piece_that_differs_is_refused(tmp_path: Path) -> None:
    data = b"\x01" * 5000
    files = [{"name": "disk.qcow2", "size": 5000, "sha256": hashlib.sha256(data).hexdigest()}]
    taker = Taker(SnapshotExport({}, None, files, "b1", 1), tmp_path / "snap")
    with pytest.raises(DiskDamagedError, match="damaged"):
        taker.write(b"\x02" + data[1:])
    taker.close()
