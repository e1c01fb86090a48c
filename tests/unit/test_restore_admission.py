"""A fleet host's agent admits a computer made from a snapshot at the disk it will have: at least
the snapshot's (`restore.disk_from_snapshot` makes it no smaller), whatever its spec names."""

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


@pytest.mark.parametrize(("named_gib", "admitted_gib"), [(None, 3), (1, 3), (5, 5)])
def test_a_fleet_host_agent_admits_a_copy_at_its_snapshot_s_disk_size(
    tmp_path: Path, named_gib: int | None, admitted_gib: int
) -> None:
    """A snapshot of a disk of 2 GiB and a byte: a copy whose spec names no disk (a build
    computer's), or a smaller one, is admitted at 3 GiB (rounded up to whole GiB), not at what
    it names or nothing; one that names a larger disk, at that. Refused, nothing is made."""
    image = Image("base", "b1", tmp_path, "6.1", 1)
    asked: list[tuple[int, int]] = []

    class Room:
        def held(
            self, memory_mib: int, disk_gib: int = 0
        ) -> contextlib.AbstractContextManager[None]:
            asked.append((memory_mib, disk_gib))
            raise HostFullError("insufficient_storage: no room")

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
    runtime, agent = cast("HostRuntime", Runtime()), cast("Any", SimpleNamespace(room=Room()))
    call = calls.CALLS["create_from_snapshot"](runtime, agent, args)
    with pytest.raises(HostFullError):
        asyncio.run(cast("Coroutine[Any, Any, Any]", call))
    assert asked == [(1024, admitted_gib)]
