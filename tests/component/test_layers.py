"""The layer store and snapshots of stopped computers, with the real qemu-img and qemu-io (no
VM): a snapshot freezes the disk as a layer and the computer writes on a new overlay; 20
generations of snapshot-and-copy keep every chain within the bound and every byte in place;
layers nothing references are deleted, and only those; a changed byte in a layer is refused;
a raw disk is frozen as it is, nothing copied, nothing lost."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.disk import qcow2
from sanbox.host.disk.layers import MAX_CHAIN
from sanbox.host.drivers import SwitchUnknownError
from sanbox.host.drivers.qemu import QemuHypervisor
from sanbox.host.drivers.qemu.qmp import QmpError
from sanbox.host.image import Image
from sanbox.host.machines.disk_switch import freeze_disk
from sanbox.host.machines.restore import disk_from_snapshot
from sanbox.host.runtime import HostRuntime, MachineSpec
from sanbox.host.snapshot import SnapshotCorruptError, SnapshotNotFoundError

pytestmark = pytest.mark.component
MIB = 1024**2


@pytest.fixture
def rt(tmp_path: Path) -> HostRuntime:
    dd = DataDir(tmp_path / "data")
    dd.ensure()
    return HostRuntime(dd, hypervisor=QemuHypervisor("tcg"), networking=False)  # boots nothing


@pytest.fixture
def image(rt: HostRuntime) -> Image:
    path = rt.data_dir.images / "base" / "b1"
    path.mkdir(parents=True)
    with open(path / "rootfs.raw", "wb") as f:
        f.truncate(64 * MIB)
        f.write(b"image-bytes")
    return Image("base", "b1", path, "6.1", 1)


def write(disk: Path, offset: int, text: str) -> None:
    fmt = qcow2.format_of(disk)
    subprocess.run(
        ["qemu-io", "-f", fmt, "-c", f"write -P {ord(text[0])} {offset} 64k", str(disk)],
        check=True,
        capture_output=True,
    )


def read(disk: Path, offset: int, text: str) -> bool:
    """Whether the 64 KiB at `offset` are all `text[0]`."""
    fmt = qcow2.format_of(disk)
    out = subprocess.run(
        ["qemu-io", "-f", fmt, "-c", f"read -P {ord(text[0])} {offset} 64k", str(disk)],
        capture_output=True,
        text=True,
    )
    return out.returncode == 0 and "Pattern verification failed" not in out.stdout


def new_computer(rt: HostRuntime, image: Image, cid: str) -> Path:
    cdir = rt.data_dir.computer(cid)
    cdir.root.mkdir(parents=True)
    return rt.disks.create(image.rootfs, cdir).path


def snapshot(rt: HostRuntime, image: Image, cid: str, sid: str) -> None:
    spec = MachineSpec(computer_id=cid)
    asyncio.run(rt.snapshot(sid, cid, None, spec, image))


def copy_of(rt: HostRuntime, sid: str, cid: str) -> Path:
    cdir = rt.data_dir.computer(cid)
    cdir.root.mkdir(parents=True)
    return disk_from_snapshot(rt.snapshots, rt.snapshots.load(sid), cdir)


def test_a_snapshot_freezes_the_disk_and_the_computer_writes_on(
    rt: HostRuntime, image: Image
) -> None:
    disk = new_computer(rt, image, "cmpa")
    write(disk, 0, "a")
    snapshot(rt, image, "cmpa", "snp_one")
    now = rt.data_dir.computer("cmpa").disk
    assert now != disk and now.parent == rt.data_dir.layers  # a new overlay on the layer
    write(now, 0, "b")
    copy = copy_of(rt, "snp_one", "cmpb")
    assert read(copy, 0, "a") and read(now, 0, "b")
    assert [s.id for s in rt.snapshots.complete()] == ["snp_one"]


def test_twenty_generations_stay_bounded_and_keep_every_byte(rt: HostRuntime, image: Image) -> None:
    cid = "gen00"
    write(new_computer(rt, image, cid), 0, "0")
    for g in range(1, 21):
        letter = "abcdefghijklmnopqrstu"[g]
        write(rt.data_dir.computer(cid).disk, g * MIB, letter)
        sid = f"snp_gen{g:02d}"
        snapshot(rt, image, cid, sid)
        child = f"gen{g:02d}"
        disk = copy_of(rt, sid, child)
        assert len(qcow2.chain(disk)) - 1 <= MAX_CHAIN  # the image not counted
        assert len(qcow2.chain(rt.data_dir.computer(cid).disk)) - 1 <= MAX_CHAIN
        asyncio.run(rt.delete_snapshot(sid))
        asyncio.run(rt.destroy(cid))  # the child's disk keeps what it stands on
        cid = child
    disk = rt.data_dir.computer(cid).disk
    assert read(disk, 0, "0")
    for g in range(1, 21):
        assert read(disk, g * MIB, "abcdefghijklmnopqrstu"[g]), g
    asyncio.run(rt.gc_layers())
    assert len(list(rt.data_dir.layers.glob("*.qcow2"))) <= MAX_CHAIN
    asyncio.run(rt.destroy(cid))
    assert asyncio.run(rt.gc_layers())
    assert not list(rt.data_dir.layers.iterdir())


def test_only_layers_nothing_references_are_deleted(rt: HostRuntime, image: Image) -> None:
    new_computer(rt, image, "cmpa")
    snapshot(rt, image, "cmpa", "snp_keep")
    snapshot(rt, image, "cmpa", "snp_drop")
    copy_of(rt, "snp_drop", "cmpb")
    before = set(rt.data_dir.layers.glob("*.qcow2"))
    asyncio.run(rt.delete_snapshot("snp_drop"))  # cmpb still stands on its layer
    assert set(rt.data_dir.layers.glob("*.qcow2")) == before
    asyncio.run(rt.destroy("cmpb"))
    asyncio.run(rt.destroy("cmpa"))
    asyncio.run(rt.gc_layers())
    kept = rt.snapshots.load("snp_keep").layer
    assert [p.name.split(".")[0] for p in rt.data_dir.layers.glob("*.qcow2")] == [kept]
    with pytest.raises(SnapshotNotFoundError):
        rt.snapshots.load("snp_drop")


def test_a_changed_layer_is_refused_with_the_reason(rt: HostRuntime, image: Image) -> None:
    write(new_computer(rt, image, "cmpa"), 0, "a")
    snapshot(rt, image, "cmpa", "snp_one")
    snap = rt.snapshots.load("snp_one")
    layer = rt.snapshots.layers.path(snap.layer)
    os.chmod(layer, 0o600)
    with open(layer, "r+b") as f:
        f.seek(layer.stat().st_size - 1)
        f.write(b"\x01")
    with pytest.raises(SnapshotCorruptError, match="does not match its digest"):
        rt.snapshots.verify(snap, None)


def test_a_half_written_snapshot_is_never_listed_and_is_swept(
    rt: HostRuntime, image: Image
) -> None:
    new_computer(rt, image, "cmpa")
    snapshot(rt, image, "cmpa", "snp_one")
    half = rt.data_dir.snapshots / ".tmp-snp_two"
    half.mkdir()
    (half / "memory").mkdir()
    no_manifest = rt.data_dir.snapshots / "snp_three"
    no_manifest.mkdir()
    assert [s.id for s in rt.snapshots.complete()] == ["snp_one"]
    asyncio.run(rt.gc_layers())
    assert not half.exists()


def test_a_raw_disk_is_frozen_as_it_is(rt: HostRuntime, image: Image) -> None:
    rt.disks._reflink = True  # a reflink filesystem gives raw disks (a copy where it does not)
    disk = new_computer(rt, image, "cmpa")
    assert disk.suffix == ".raw"
    write(disk, 0, "r")
    snapshot(rt, image, "cmpa", "snp_raw")
    now = rt.data_dir.computer("cmpa").disk
    assert now.suffix == ".qcow2" and read(now, 0, "r")
    snap = rt.snapshots.load("snp_raw")
    assert rt.snapshots.layers.path(snap.layer).suffix == ".raw"
    write(now, 0, "s")
    assert read(copy_of(rt, "snp_raw", "cmpb"), 0, "r") and read(now, 0, "s")


class Switching:
    """A running VM's handle as a disk switch sees it: the switch raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.killed = False

    async def switch_disk(self, overlay: Path) -> None:
        raise self.error

    async def kill(self, timeout: float = 5.0) -> None:
        self.killed = True


@pytest.mark.parametrize("answered", [True, False])
def test_a_disk_switch_that_fails_keeps_every_byte_the_guest_wrote(
    rt: HostRuntime, image: Image, answered: bool
) -> None:
    """Refused, the switch is undone (the overlay was never written); not answered and not
    known (QEMU may be writing to the overlay), nothing is taken away and the VM ends: the
    computer's disk, the overlay on the frozen disk, holds all it wrote either way."""
    disk = new_computer(rt, image, "cmpsw")
    write(disk, 0, "a")
    cdir = rt.data_dir.computer("cmpsw")
    before = cdir.disk
    vm = Switching(QmpError("QEMU refused blockdev-snapshot") if answered else SwitchUnknownError())
    with pytest.raises(QmpError if answered else SwitchUnknownError):
        asyncio.run(freeze_disk(rt.snapshots, rt.machines, cdir, vm))  # type: ignore[arg-type]
    if answered:
        assert cdir.disk == before and not vm.killed
        assert sorted(rt.data_dir.layers.iterdir()) == []
    else:
        assert vm.killed and cdir.disk != before
        assert cdir.disk.parent == rt.data_dir.layers and cdir.disk.exists()
    assert read(cdir.disk, 0, "a")
