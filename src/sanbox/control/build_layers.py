"""The snapshots a template build keeps of its computers (state `layer`): each step's disk, and
the template's ready snapshot (its disk and its memory). Each is recorded `creating` before it
is taken, and what it holds is in its org's disk quota from then on (`quotas.use` sums every
build layer's `size_bytes`, those being taken too):

- a step's layer is what the step wrote to the build computer's disk, whose whole size the build
  VM's record holds already (`build_vms`): recorded holding nothing more, it needs a GiB of room
  (`build_vms.room_for_a_layer`), and after the build VM is gone the org's use is within its
  quota whatever the step wrote;
- the ready snapshot adds the computer's memory image (up to the spec's memory, and the device
  state beside it), which no VM record holds: its record is written, holding that many bytes,
  in the transaction that checks the org's disk quota for them, before the readiness computer
  boots. A build that would pass the quota with it ends there, nothing made, and no create can
  take the room while the readiness check runs.

Once taken, a record holds the bytes the host measured (`snapshots.kept`); a take that fails, or
a build that ends before its take, removes the record.

A build computer's disk is its spec's size, or the image's, but never smaller than the snapshot
it starts from (a base template's disk, a cached step's: the host does not shrink a disk), so
`disk_gib` says so for its VM's record and its layers' (which computers of the template then
count at that size)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import select

from ..host.door import GIB, Image, MachineSpec
from ..store import Database, repo
from ..store.models import SnapshotRow
from ..templates.spec import Spec
from . import quotas

MIB = 1 << 20
SAVED_STATE = 64 * MIB  # the device state and manifest saved beside a memory image, at most


def ready_bytes(memory_mib: int) -> int:
    """What a ready snapshot holds beyond its computer's disk: its memory image, device state."""
    return memory_mib * MIB + SAVED_STATE


def start_disk(db: Database, snapshot_id: str | None) -> int:
    """The disk (GiB) of the snapshot a build computer starts from (0: none, or not recorded)."""
    if snapshot_id is None:
        return 0
    with db.session() as s:
        found = s.scalar(select(SnapshotRow.disk_gib).where(SnapshotRow.id == snapshot_id))
    return int(found or 0)


def disk_gib(spec: Spec, starts_from: int) -> int | None:
    """A build computer's disk: the spec's, at least what it starts from (None: the image's)."""
    return max(spec.disk_gib or 0, starts_from) or None


def record(
    db: Database,
    org_id: str,
    spec: Spec,
    template: str,
    mspec: MachineSpec,
    image: Image,
    host_id: str | None,
    memory: bool,
) -> str:
    """A new snapshot's record of the build computer `mspec`, `creating` (with `memory`: the
    template's ready snapshot, holding `ready_bytes` in the org's disk quota, checked in this
    transaction: `quotas.QuotaExceededError` before anything is written). Its id."""
    held = ready_bytes(spec.memory_mib) if memory else 0
    row = SnapshotRow(
        id=repo.new_id("snp_"),
        org_id=org_id,
        name=None,
        state="creating",
        computer_id=mspec.computer_id,
        computer_name=f"build of {template}",
        template=template,
        image=image.build_id,
        vcpus=spec.vcpus,
        memory_mib=spec.memory_mib,
        disk_gib=mspec.disk_gib or 0,
        memory=memory,
        size_bytes=held,
        env=dict(spec.env),
        allow=list(spec.allow),
        idle_timeout=spec.idle_timeout,
        host_id=host_id,
    )
    with db.session() as s:
        if held:
            quotas.check(s, org_id, quotas.Use(disk_gib=-(-held // GIB)))
        s.add(row)
    return row.id


@contextlib.contextmanager
def until_kept(db: Database, snapshot_id: str) -> Iterator[None]:
    """The record removed if the block fails before its take kept it (a failed take removed it
    already): no room held for a snapshot that will not be."""
    try:
        yield
    except BaseException:
        with db.session() as s:
            row = s.get(SnapshotRow, snapshot_id)
            if row is not None and row.state == "creating":
                s.delete(row)
        raise
