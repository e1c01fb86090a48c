"""A fleet host's agent admits a computer at the disk it will have before it makes anything: one
made from a snapshot at least at the snapshot's (`restore.disk_from_snapshot` makes it no
smaller), whatever its spec names; one whose create names no disk (a build computer's) at its
image's size."""

import asyncio
import contextlib
from collections.abc import Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sanbox.fleet.link import calls, wire
from sanbox.host.door import HostFullError, Image, MachineSpec
from sanbox.host.runtime import HostRuntime

pytestmark = pytest.mark.unit

GIB = 1024**3


class RefusingRoom:
    """A host agent's room that notes what it is asked to hold and has room for nothing."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    def held(self, memory_mib: int, disk_gib: int = 0) -> contextlib.AbstractContextManager[None]:
        self.asked.append((memory_mib, disk_gib))
        raise HostFullError("insufficient_storage: no room")


@pytest.mark.parametrize(("named_gib", "admitted_gib"), [(None, 3), (1, 3), (5, 5)])
def test_a_fleet_host_agent_admits_a_copy_at_its_snapshot_s_disk_size(
    tmp_path: Path, named_gib: int | None, admitted_gib: int
) -> None:
    """A snapshot of a disk of 2 GiB and a byte: a copy whose spec names no disk (a build
    computer's), or a smaller one, is admitted at 3 GiB (rounded up to whole GiB), not at what
    it names or nothing; one that names a larger disk, at that. Refused, nothing is made."""
    image = Image("base", "b1", tmp_path, "6.1", 1)
    room = RefusingRoom()

    class Snapshots:
        def load(self, snapshot_id: str) -> Any:
            assert snapshot_id == "snp_a"
            return SimpleNamespace(disk_bytes=2 * GIB + 1)

    class Runtime:
        snapshots = Snapshots()

        def build(self, build_id: str) -> Image:
            return image

        async def create_from_snapshot(self, *args: object) -> Any:
            raise AssertionError("made without room")

    spec = MachineSpec("cmp-a", 1, 1024, named_gib, "copy")
    args = {"spec": wire.spec_out(spec), "image": wire.image_out(image), "snapshot_id": "snp_a"}
    runtime, agent = cast("HostRuntime", Runtime()), cast("Any", SimpleNamespace(room=room))
    call = calls.CALLS["create_from_snapshot"](runtime, agent, args)
    with pytest.raises(HostFullError):
        asyncio.run(cast("Coroutine[Any, Any, Any]", call))
    assert room.asked == [(1024, admitted_gib)]


def test_a_fleet_host_agent_admits_a_create_of_no_named_disk_at_its_image_s_size(
    tmp_path: Path,
) -> None:
    """A build computer's create names no disk: the host agent admits its image's size (3 GiB,
    rounded up to whole GiB), not nothing, before it makes anything."""
    image = Image("base", "b1", tmp_path, "6.1", 3)
    with image.rootfs.open("wb") as f:
        f.truncate(2 * GIB + 1)
    room = RefusingRoom()

    class Runtime:
        def build(self, build_id: str) -> Image:
            assert build_id == "b1"
            return image

    args = {"spec": wire.spec_out(MachineSpec("bld-a", 1, 1024, None, "base"))}
    args["image"] = wire.image_out(image)
    runtime, agent = cast("HostRuntime", Runtime()), cast("Any", SimpleNamespace(room=room))
    call = calls.CALLS["create"](runtime, agent, args)
    with pytest.raises(HostFullError):
        asyncio.run(cast("Coroutine[Any, Any, Any]", call))
    assert room.asked == [(1024, 3)]
