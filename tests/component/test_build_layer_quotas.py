"""What a template build leaves on its host is in its org's disk quota at what the host holds,
and held before it is made: the ready snapshot's memory image (up to the spec's memory, which
no VM record holds once the readiness VM is gone) has room in the quota before its computer
boots, or the build ends there with nothing made; a build computer's disk is never counted
smaller than the snapshot it starts from (a base template's, a cached step's), nor are the
template's layers and so its computers. The stand-in host cannot snapshot a process, so these
builds take their snapshots with `Snapshots`, a stand-in that measures what we say."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select

from sanbox.host.door import Image, Machine, MachineSpec, SnapshotManifest
from sanbox.host.image import recipe_for
from sanbox.host.runtime import HostRuntime
from sanbox.store import repo
from sanbox.store.models import SnapshotRow, TemplateRow

from .conftest import Server
from .test_build_quotas import GIB, build, ended, spec, use
from .test_quotas import create, quota, refused

pytestmark = pytest.mark.component

MIB = 1 << 20


class Snapshots:
    """The host's snapshot and restore, as a build uses them: a step's layer measures
    `layer_bytes`, a ready snapshot that and its memory; a restore boots the image."""

    def __init__(self, runtime: HostRuntime, layer_bytes: int) -> None:
        self.runtime, self.layer_bytes = runtime, layer_bytes
        self.taken: list[str] = []

    async def snapshot(
        self,
        snapshot_id: str,
        computer_id: str,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        memory: bool = False,
        live: bool = True,
    ) -> SnapshotManifest:
        self.taken.append(snapshot_id)
        size = self.layer_bytes + (spec.memory_mib * MIB if memory else 0)
        return SnapshotManifest(
            id=snapshot_id,
            computer_id=computer_id,
            layer="layer",
            layer_digest="digest",
            disk_bytes=(spec.disk_gib or 1) * GIB,
            memory=memory,
            image=image.build_id,
            vcpus=spec.vcpus,
            memory_mib=spec.memory_mib,
            size_bytes=size,
            paused_seconds=0.0,
            created_at=time.time(),
        )

    async def create_from_snapshot(
        self, spec: MachineSpec, image: Image, snapshot_id: str
    ) -> tuple[Machine, None]:
        machine, _disk = await self.runtime.create(spec, image)
        return machine, None


def stand_in(server: Server, monkeypatch: pytest.MonkeyPatch, layer_bytes: int) -> Snapshots:
    runtime = server.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
    fake = Snapshots(runtime, layer_bytes)
    monkeypatch.setattr(runtime, "snapshot", fake.snapshot)
    monkeypatch.setattr(runtime, "create_from_snapshot", fake.create_from_snapshot)
    return fake


def db_of(server: Server) -> Any:
    return server.client.app.state.db  # type: ignore[attr-defined]


def build_layers_of(server: Server, template: str) -> list[SnapshotRow]:
    with db_of(server).session() as s:
        where = SnapshotRow.template == template
        return list(s.scalars(select(SnapshotRow).where(where)))


def org_id(server: Server) -> str:
    with db_of(server).session() as s:
        org = repo.org_by_name(s, "default")
        assert org is not None
        return str(org.id)


def test_a_ready_snapshot_without_room_for_its_memory_ends_the_build_before_it_boots(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: the readiness VM's record holds its disk, and nothing held the 2 GiB
    memory image its ready snapshot keeps after it is gone, so the build passed the org's disk
    quota after the fact. Now the ready snapshot's record holds that room before its computer
    boots: without it the build fails there, no readiness VM made, nothing of it kept."""
    fake = stand_in(server, monkeypatch, layer_bytes=GIB + 1)
    assert quota(server, disk_gib=4).status_code == 200
    # up front: the build VM's 1 GiB disk and 3 GiB for the memory image fit an empty org
    assert build(server, spec("roomy", memory_mib=2048)).status_code == 202
    got = ended(server, "roomy")
    assert got["state"] == "failed", got
    assert got["error"].startswith("boot it and save it ready: quota exceeded"), got["error"]
    assert "disk allocated quota is 4 GiB, it uses 3 GiB and this needs 3 GiB more" in got["error"]
    assert "sanbox org quota default --disk N" in got["error"]
    assert len(fake.taken) == 2  # the step's layer and the configuration's: no ready snapshot
    layers = build_layers_of(server, "roomy")
    assert sorted(r.state for r in layers) == ["layer", "layer"]
    assert not any(r.memory for r in layers)
    assert use(server)["disk_gib"] == 3 and use(server)["running"] == 0


def test_a_ready_snapshot_counts_its_memory_and_holds_it_while_being_taken(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room, the ready snapshot is kept at the bytes the host measured, its memory image
    too; a build's layer being taken holds what its record says in the quota meanwhile."""
    stand_in(server, monkeypatch, layer_bytes=MIB)
    assert build(server, spec("kept", memory_mib=2048)).status_code == 202
    got = ended(server, "kept")
    assert got["state"] == "ready" and got["ready_snapshot"], got
    ready = [r for r in build_layers_of(server, "kept") if r.memory]
    assert len(ready) == 1 and ready[0].size_bytes == MIB + 2048 * MIB
    assert use(server)["disk_gib"] == 3  # 3 MiB of layers and the 2 GiB memory image
    with db_of(server).session() as s:
        s.add(
            SnapshotRow(
                id=repo.new_id("snp_"),
                org_id=org_id(server),
                name=None,
                state="creating",
                computer_id=repo.new_id("bld-"),
                computer_name="build of next",
                template="next",
                image="img",
                vcpus=1,
                memory_mib=4096,
                disk_gib=1,
                memory=True,
                size_bytes=4096 * MIB + 64 * MIB,  # build_layers.ready_bytes(4096)
                env={},
                allow=[],
                idle_timeout=0,
            )
        )
    assert use(server)["disk_gib"] == 7  # 4 GiB and 64 MiB more held: 6.07 GiB, rounded up


def _big_base(server: Server, disk_gib: int) -> None:
    """A built template `big` whose disk is `disk_gib` (as a quota once let it be built)."""
    build_id = recipe_for("base").build_id()
    snap_id = repo.new_id("snp_")
    with db_of(server).session() as s:
        owner = org_id(server)
        s.add(
            SnapshotRow(
                id=snap_id,
                org_id=owner,
                name=None,
                state="layer",
                computer_id=repo.new_id("bld-"),
                computer_name="build of big",
                template="big",
                image=build_id,
                vcpus=1,
                memory_mib=512,
                disk_gib=disk_gib,
                memory=False,
                size_bytes=MIB,
                env={},
                allow=[],
                idle_timeout=0,
            )
        )
        s.add(
            TemplateRow(
                id=repo.new_id("tpl_"),
                org_id=owner,
                name="big",
                region="",
                state="ready",
                base="base",
                spec="",
                digest="d",
                vcpus=1,
                memory_mib=512,
                disk_gib=disk_gib,
                snapshot_id=snap_id,
                image=build_id,
            )
        )


def child(name: str) -> bytes:
    return f'name = "{name}"\nbase = "big"\n[[steps]]\nrun = "echo built"\n'.encode()


def test_a_build_from_a_larger_disk_is_counted_at_that_disk_up_front(server: Server) -> None:
    """A build on a base template's 50 GiB disk, its spec naming none: its computer gets that
    disk (the host never shrinks one), and was counted at the image's 1 GiB."""
    _big_base(server, 50)
    assert quota(server, disk_gib=20).status_code == 200
    message = refused(build(server, child("small")), "disk allocated quota is 20 GiB")
    assert "this needs 51 GiB more" in message  # 50 GiB of disk, 1 GiB for its memory image


def test_the_layers_and_computers_of_a_build_on_a_larger_disk_count_that_disk(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its VM's record, its layers and so its template's computers say the disk it has."""
    stand_in(server, monkeypatch, layer_bytes=MIB)
    _big_base(server, 50)
    assert build(server, child("small")).status_code == 202
    assert ended(server, "small")["state"] == "ready"
    layers = build_layers_of(server, "small")
    assert len(layers) == 3 and {r.disk_gib for r in layers} == {50}
    r = create(server, "squeezed", template="small", disk_gib=2)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "disk_too_small"
    assert "(50 GiB)" in r.json()["error"]["message"]
