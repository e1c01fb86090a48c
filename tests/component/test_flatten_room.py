"""A snapshot whose layer would make chains too deep writes a flat copy of its disk's layers
beside its new overlay (`LayerStore.flatten`): up to the disk's size, written at once. It is
admitted with the snapshot, counted whole as saved memory is, on this server's host by the
control plane's `Capacity.admit_snapshot` and on a fleet host by its agent (`HostRoom`); no room
refuses the snapshot before anything is written. Real qcow2 chains (qemu-img, qemu-io); no VM."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sanbox.control.capacity import Capacity
from sanbox.control.errors import InsufficientStorageError
from sanbox.fleet.link.room import HostRoom
from sanbox.host.data import space
from sanbox.host.disk.layers import MAX_CHAIN
from sanbox.host.door import HostFullError
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime

from .test_layers import MIB, image, new_computer, rt, snapshot, write

pytestmark = pytest.mark.component

__all__ = ["image", "rt"]  # the fixtures, used by name
GIB = 1024 * MIB


def test_a_snapshot_that_flattens_is_admitted_with_its_flat_copy(
    rt: HostRuntime, image: Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seven snapshots leave the computer's disk on a chain of seven layers: the eighth would be
    too deep, so it is flattened. Until then a snapshot writes no copy; then it writes what the
    chain holds (8 x 64 KiB written, and each file's metadata), at most the disk's 64 MiB, and
    the copy the take makes is no larger than what was admitted. Free space for the new overlay
    but not the copy refuses it (a fleet host's agent as this server does), saying so."""
    cid = "flat"
    write(new_computer(rt, image, cid), 0, "0")
    for g in range(1, MAX_CHAIN):
        assert rt.flat_copy_bytes(cid) == 0, g
        write(rt.data_dir.computer(cid).disk, g * MIB, "abcdefgh"[g])
        snapshot(rt, image, cid, f"snp_gen{g}")
    copy = rt.flat_copy_bytes(cid)
    assert MAX_CHAIN * 64 * 1024 < copy <= 64 * MIB

    free = {"bytes": GIB + copy - 1}
    real = space._free
    root = rt.data_dir.root
    monkeypatch.setattr(space, "_free", lambda p: free["bytes"] if Path(p) == root else real(p))
    node = Capacity(cpus=2, memory_mib=4096)
    with pytest.raises(InsufficientStorageError, match="flat copy of its disk's layers") as no:
        node.admit_snapshot(rt, cid, 1)
    assert no.value.code == "insufficient_storage"
    assert "a 1024 MiB disk and a " in no.value.message
    with pytest.raises(HostFullError, match="flat copy"), HostRoom(rt).snapshot(cid, 1, 0):
        pass
    assert node.ledger.totals() == (0, 0, 0)

    free["bytes"] = GIB + copy
    with node.admit_snapshot(rt, cid, 1):
        assert node.ledger.totals() == (0, GIB, copy)
        before = set(rt.data_dir.layers.glob("*.qcow2"))
        snapshot(rt, image, cid, "snp_deep")
    flat = rt.snapshots.layers.path(rt.snapshots.load("snp_deep").layer)
    assert flat not in before and rt.snapshots.layers.load(flat.name.split(".")[0]).depth == 1
    assert flat.stat().st_size <= copy
    assert node.ledger.totals() == (0, 0, 0)
    asyncio.run(rt.destroy(cid))
