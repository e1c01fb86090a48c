import os
from pathlib import Path

import pytest

from sanbox.host.disk import DiskExistsError, DiskManager, DiskTooSmallError, clone_file
from sanbox.host.errors import LayoutError
from sanbox.host.layout import DataDir

pytestmark = pytest.mark.component
MIB = 1024**2


@pytest.fixture
def data_dir(tmp_path: Path) -> DataDir:
    dd = DataDir(tmp_path / "data")
    dd.ensure()
    return dd


def sparse_image(path: Path, size: int) -> bytes:
    chunk = os.urandom(MIB)
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(0)
        f.write(chunk)
        f.seek(size // 2)
        f.write(chunk)
    return chunk


def test_clone_keeps_content_and_holes(data_dir: DataDir) -> None:
    image = data_dir.images / "img.raw"
    chunk = sparse_image(image, 256 * MIB)
    disk = DiskManager(data_dir).create(image, data_dir.computers / "c1" / "disk.raw")
    assert disk.method in ("reflink", "copy")
    with open(disk.path, "rb") as f:
        assert f.read(MIB) == chunk
        f.seek(128 * MIB)
        assert f.read(MIB) == chunk
        f.seek(64 * MIB)
        assert f.read(MIB) == b"\0" * MIB
    assert disk.path.stat().st_blocks * 512 < 16 * MIB  # holes stayed holes


def test_grow_and_refuse_to_shrink(data_dir: DataDir) -> None:
    image = data_dir.images / "img.raw"
    sparse_image(image, 64 * MIB)
    disks = DiskManager(data_dir)
    disk = disks.create(image, data_dir.computers / "c1" / "disk.raw", 128 * MIB)
    assert disk.path.stat().st_size == 128 * MIB
    with pytest.raises(DiskTooSmallError, match="only grow"):
        disks.grow(disk.path, 64 * MIB)
    with pytest.raises(DiskTooSmallError, match="smaller than the image"):
        disks.create(image, data_dir.computers / "c2" / "disk.raw", 32 * MIB)
    assert not (data_dir.computers / "c2" / "disk.raw").exists()


def test_bad_paths_lose_nothing(data_dir: DataDir, tmp_path: Path) -> None:
    image = data_dir.images / "img.raw"
    sparse_image(image, 8 * MIB)
    disks = DiskManager(data_dir)
    with pytest.raises(LayoutError, match="outside the data dir"):
        disks.create(image, tmp_path / "elsewhere.raw")
    assert not (tmp_path / "elsewhere.raw").exists()
    disk = disks.create(image, data_dir.computers / "c1" / "disk.raw")
    disk.path.write_bytes(b"precious")
    with pytest.raises(DiskExistsError):
        disks.create(image, disk.path)
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
