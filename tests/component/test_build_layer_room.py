"""A template build's snapshots are admitted on the data filesystem before they are taken, as a
computer's are: each step's layer moves the build computer onto a new overlay promised its
disk's full size (a spec with many steps writes that many layers), and the ready snapshot keeps
its memory too. No room ends the build with the step and what does not fit, its snapshot's
record removed and nothing taken; what is admitted is held while it is taken. The data
filesystem's free space is set by the test (`space._free`); the build computer's disk is the
real one the local driver made, its snapshots the stand-in's (`test_build_layer_quotas`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sanbox.host.door import GIB, Image, Machine, MachineSpec, SnapshotManifest

from .conftest import Server
from .test_build_layer_quotas import MIB, build_layers_of, stand_in
from .test_build_quotas import build, ended, spec, use
from .test_pause_snapshot_room import capacity, data_free

pytestmark = pytest.mark.component

__all__ = ["data_free"]  # the fixture, used by name


def test_a_build_step_whose_layer_would_not_fit_ends_the_build_with_nothing_taken(
    server: Server, monkeypatch: pytest.MonkeyPatch, data_free: Callable[[int], None]
) -> None:
    """Once the build computer is made, 512 MiB is left: its first step's layer would move it
    onto a new 1 GiB overlay (its image's size), which does not fit. The build fails at that
    step, saying what does not fit; no layer is taken and no record of one is left."""
    fake = stand_in(server, monkeypatch, layer_bytes=MIB)
    runtime = server.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
    real_create = runtime.create

    async def create_then_fill(mspec: MachineSpec, image: Image) -> Any:
        made = await real_create(mspec, image)
        data_free(512 * MIB)  # the build computer fitted; its layer will not
        return made

    monkeypatch.setattr(runtime, "create", create_then_fill)
    assert build(server, spec("crowded")).status_code == 202
    got = ended(server, "crowded")
    assert got["state"] == "failed", got
    assert got["error"].startswith("step 1/2 ("), got["error"]
    assert "1024 MiB disk does not fit on the data filesystem" in got["error"]
    assert "Delete computers or snapshots" in got["error"]
    assert fake.taken == []
    assert build_layers_of(server, "crowded") == []
    assert capacity(server).ledger.totals() == (0, 0, 0)
    assert use(server)["running"] == 0


def test_a_build_s_snapshots_hold_their_room_while_taken(
    server: Server, monkeypatch: pytest.MonkeyPatch, data_free: Callable[[int], None]
) -> None:
    """With room, each snapshot holds its new overlay (the image's 1 GiB) while it is taken,
    the ready snapshot its memory too, and gives it back once it is kept."""
    fake = stand_in(server, monkeypatch, layer_bytes=MIB)
    held: list[tuple[int, int, int]] = []

    async def holding(
        snapshot_id: str,
        computer_id: str,
        machine: Machine | None,
        mspec: MachineSpec,
        image: Image,
        memory: bool = False,
        live: bool = True,
    ) -> SnapshotManifest:
        held.append(capacity(server).ledger.totals())
        return await fake.snapshot(snapshot_id, computer_id, machine, mspec, image, memory, live)

    runtime = server.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
    monkeypatch.setattr(runtime, "snapshot", holding)
    data_free(64 * GIB)
    assert build(server, spec("roomy", memory_mib=512)).status_code == 202
    assert ended(server, "roomy")["state"] == "ready"
    assert held == [(0, GIB, 0), (0, GIB, 0), (0, GIB, 512 * MIB)]
    assert capacity(server).ledger.totals() == (0, 0, 0)
