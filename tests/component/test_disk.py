"""Computers' disks: qcow2 overlays on the image (or reflink clones where the filesystem has
them), checked with the real qemu-img: contents, holes, constant cost, growth, bad paths."""

import os
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.disk import DiskExistsError, DiskManager, DiskTooSmallError, clone_file, qcow2
from sanbox.host.errors import LayoutError

pytestmark = pytest.mark.component
MIB = 1024**2
GIB = 1024**3


@pytest.fixture
def data_dir(tmp_path: Path) -> DataDir:
    dd = DataDir(tmp_path / "data")
    dd.ensure()
    return dd


@pytest.fixture(params=["overlay", "clone"])
def disks(request: pytest.FixtureRequest, data_dir: DataDir) -> DiskManager:
    manager = DiskManager(data_dir)
    manager._reflink = request.param == "clone"  # a reflink filesystem takes the clone path
    return manager


def sparse_image(path: Path, size: int) -> bytes:
    chunk = os.urandom(MIB)
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(0)
        f.write(chunk)
        f.seek(size // 2)
        f.write(chunk)
    return chunk


def read_guest_view(path: Path, offset: int, size: int, tmp: Path) -> bytes:
    """What a VM would read at `offset`, whatever the disk's format (qemu-img converts)."""
    flat = tmp / "flat.raw"
    flat.unlink(missing_ok=True)
    if qcow2.format_of(path) == "qcow2":
        qcow2._run("convert", "-O", "raw", str(path), str(flat))
        path = flat
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def test_disk_keeps_content_and_costs_little(
    data_dir: DataDir, disks: DiskManager, tmp_path: Path
) -> None:
    image = data_dir.images / "img.raw"
    chunk = sparse_image(image, 256 * MIB)
    disk = disks.create(image, data_dir.computer("cmp_c1"))
    assert disk.path == data_dir.computer("cmp_c1").disk
    assert read_guest_view(disk.path, 0, MIB, tmp_path) == chunk
    assert read_guest_view(disk.path, 128 * MIB, MIB, tmp_path) == chunk
    assert read_guest_view(disk.path, 64 * MIB, MIB, tmp_path) == b"\0" * MIB
    assert disk.path.stat().st_blocks * 512 < 16 * MIB  # holes stayed holes / nothing copied
    assert disks.size(disk.path) == 256 * MIB


def test_an_overlay_costs_the_same_for_any_image_size(data_dir: DataDir) -> None:
    disks = DiskManager(data_dir)
    disks._reflink = False
    for gib in (1, 20):
        image = data_dir.images / f"img{gib}.raw"
        sparse_image(image, gib * GIB)
        disk = disks.create(image, data_dir.computer(f"cmp_s{gib}"))
        assert disk.method == "overlay" and disk.format == "qcow2"
        assert disk.path.stat().st_size < 4 * MIB  # metadata only
        assert [layer.path for layer in qcow2.chain(disk.path)] == [disk.path, image.resolve()]


def test_grow_and_refuse_to_shrink(data_dir: DataDir, disks: DiskManager) -> None:
    image = data_dir.images / "img.raw"
    sparse_image(image, 64 * MIB)
    disk = disks.create(image, data_dir.computer("cmp_c1"), 128 * MIB)
    assert disks.size(disk.path) == 128 * MIB
    disks.grow(disk.path, 256 * MIB)
    assert disks.size(disk.path) == 256 * MIB
    if qcow2.format_of(disk.path) == "qcow2":  # the header read agrees with qemu-img's
        assert qcow2.virtual_size(disk.path) == qcow2.chain(disk.path)[0].virtual_size
    with pytest.raises(DiskTooSmallError, match="only grow"):
        disks.grow(disk.path, 64 * MIB)
    with pytest.raises(DiskTooSmallError, match="smaller than the image"):
        disks.create(image, data_dir.computer("cmp_c2"), 32 * MIB)
    assert not data_dir.computer("cmp_c2").disk.exists()


def test_bad_paths_lose_nothing(data_dir: DataDir, disks: DiskManager) -> None:
    image = data_dir.images / "img.raw"
    sparse_image(image, 8 * MIB)
    cdir = data_dir.computer("cmp_c1")
    disk = disks.create(image, cdir)
    disk.path.write_bytes(b"precious")
    with pytest.raises(DiskExistsError):
        disks.create(image, cdir)
    assert disk.path.read_bytes() == b"precious"
    with pytest.raises(LayoutError):
        disks.delete(Path("/etc/hostname"))
    disks.delete(disk.path)
    assert not disk.path.exists()


def test_clone_refuses_existing_target(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(FileExistsError):
        clone_file(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == b"b"
