"""Snapshots: a computer's disk at one moment, with its memory when asked, kept by the org after
the computer is gone. The record is written `creating` first and becomes `ready` only once the
host's files are complete, durable and verified; a snapshot that failed leaves no record and no
files, and its computer runs on as it was."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from ..host.door import Host, HostError, Image, Machine, SnapshotManifest
from ..store import repo
from ..store.models import ComputerRow, Org, SnapshotRow
from . import quotas
from .capacity import Hold
from .errors import ConflictError, InsufficientStorageError, NotFoundError, with_state
from .fleet import Fleet
from .host_errors import from_host
from .names import check_name
from .states import HAS_MEMORY, State

log = logging.getLogger(__name__)


def get(fleet: Fleet, org: Org, ref: str) -> SnapshotRow:
    with fleet.db.session() as s:
        row = repo.snapshot(s, org.id, ref)
    if row is None:
        raise NotFoundError(f"no snapshot {ref!r}: see `sanbox snapshot ls`", "snapshot_not_found")
    return row


def give_name(fleet: Fleet, org: Org, snapshot_id: str, name: str) -> SnapshotRow:
    """Name the org's snapshot `snapshot_id` `name`, taking the name from the snapshot that had
    it, if any (it keeps its id): E2B's named snapshot, whose newest build a create by that name
    gets. One transaction."""
    check_name(name, "snapshot")
    with fleet.db.session() as s:
        for other in repo.list_snapshots(s, org.id, state=None):
            if other.name == name and other.id != snapshot_id:
                other.name = None
        s.flush()
        row = repo.snapshot(s, org.id, snapshot_id)
        if row is None:
            raise NotFoundError(f"no snapshot {snapshot_id!r}", "snapshot_not_found")
        row.name = name
    return row


def find(fleet: Fleet, org: Org) -> list[SnapshotRow]:
    with fleet.db.session() as s:
        return repo.list_snapshots(s, org.id)


def _insert(fleet: Fleet, row: ComputerRow, memory: bool, name: str | None) -> SnapshotRow:
    with fleet.db.session() as s:
        if name is not None and repo.snapshot_name_taken(s, row.org_id, name):
            raise ConflictError(
                f"a snapshot named {name!r} already exists: pick another name", "name_taken"
            )
        quotas.check(s, row.org_id, quotas.Use(snapshots=1))
        snap = SnapshotRow(
            id=repo.new_id("snp_"),
            org_id=row.org_id,
            name=name,
            state="creating",
            computer_id=row.id,
            computer_name=row.name,
            template=row.template,
            image=row.image,
            vcpus=row.vcpus,
            memory_mib=row.memory_mib,
            disk_gib=row.disk_gib,
            memory=memory,
            size_bytes=0,
            env=dict(row.env),
            allow=list(row.allow),
            idle_timeout=row.idle_timeout,
            host_id=row.host_id,
        )
        s.add(snap)
        s.flush()
    return snap


def _drop(fleet: Fleet, snapshot_id: str) -> None:
    with fleet.db.session() as s:
        live = s.get(SnapshotRow, snapshot_id)
        if live is not None:
            s.delete(live)


async def kept(
    fleet: Fleet, snapshot_id: str, taking: Awaitable[SnapshotManifest], state: str = "ready"
) -> tuple[SnapshotRow, SnapshotManifest]:
    """The host's take of the snapshot whose record (`creating`) is `snapshot_id`: the record
    then goes to `state` with its size, or, if the take fails, away (no record of a snapshot
    that is not there). Build layers use it too (state `layer`)."""
    try:
        taken = await taking
    except BaseException:
        _drop(fleet, snapshot_id)
        raise
    with fleet.db.session() as s:
        live = s.get(SnapshotRow, snapshot_id)
        assert live is not None
        live.state, live.size_bytes = state, taken.size_bytes
    return live, taken


async def take(fleet: Fleet, org: Org, ref: str, memory: bool, name: str | None) -> SnapshotRow:
    if name is not None:
        check_name(name, "snapshot")
    async with fleet.acting(org, ref, "snapshot") as row:
        if memory and row.state not in HAS_MEMORY:
            raise ConflictError(
                f"computer {row.name} is {row.state}: it has no memory to keep; take a disk-only "
                "snapshot (without --memory) or start it first",
                "invalid_transition",
            )
        # what can fail before the take (its host, its image, its VM) fails before its record
        host, image = fleet.host_of(row), fleet.image_of(row)
        machine = await fleet.machine_locked(row) if row.state == State.RUNNING else None
        with admitted(fleet, host, row, machine, memory, "no snapshot was taken"):
            return await _taken(fleet, row, host, image, machine, memory, name)
    raise AssertionError("unreachable")


def admitted(
    fleet: Fleet, host: Host, row: ComputerRow, machine: Machine | None, memory: bool, kept: str
) -> Hold:
    """Room on the data filesystem for a snapshot of `row` (a fork's too), held while it is
    taken: its new overlay's full size, its memory with `memory`. Refused (507
    `insufficient_storage`) before anything is written, saying the computer is as it was."""
    try:
        return fleet.capacity.admit_snapshot(
            host, row.id, row.disk_gib, row.memory_mib if memory else 0
        )
    except InsufficientStorageError as exc:
        why = "a snapshot moves the computer onto a new disk overlay that may fill as its disk may"
        if memory:
            why += ", and keeps its memory"
        raise with_state(exc, f"{why}; {state_after(fleet, row.id, machine, kept)}") from None


async def _taken(
    fleet: Fleet,
    row: ComputerRow,
    host: Host,
    image: Image,
    machine: Machine | None,
    memory: bool,
    name: str | None,
) -> SnapshotRow:
    """The snapshot recorded `creating`, taken by the host, then `ready`; or no record."""
    snap = _insert(fleet, row, memory, name)
    kind = "with memory" if memory else "disk only"
    fleet.record(
        row.id,
        None,
        "snapshot.creating",
        f"snapshot {snap.id} ({kind})",
        {"snapshot": snap.id, "memory": memory},
    )
    try:
        snap, taken = await kept(
            fleet,
            snap.id,
            host.snapshot(snap.id, row.id, machine, fleet.spec(row), image, memory=memory),
        )
    except HostError as exc:  # its record is gone already
        error = from_host(exc, "snapshot", row.id)
        fleet.record(row.id, None, "snapshot.failed", error.message, {"snapshot": snap.id})
        if machine is not None and not machine.vm.alive():
            await fleet.vm_exited(row.id, "its VM died during a snapshot")
        now = await state_after_failure(fleet, row.id, machine, "snapshot", "no snapshot was kept")
        raise with_state(error, now) from exc
    fleet.record(
        row.id,
        None,
        "snapshot.ready",
        f"snapshot {snap.id} ready ({kind}, {taken.size_bytes / 2**20:.0f} MiB of its own, "
        f"the computer paused {taken.paused_seconds:.2f}s)",
        {
            "snapshot": snap.id,
            "memory": memory,
            "size_bytes": taken.size_bytes,
            "paused_seconds": round(taken.paused_seconds, 3),
        },
    )
    return snap


async def state_after_failure(
    fleet: Fleet, computer_id: str, machine: Machine | None, verb: str, kept: str
) -> str:
    """`state_after` a snapshot or fork whose take failed on the host, once its source's vCPUs
    are known to run: the host stops them for the save and lets them run again after it, and
    that last step may fail too (a monitor that did not answer `cont`), leaving a VM alive but
    frozen, whose every command would hang. Such a VM is continued once more; one that stays
    frozen is ended and the computer put in error (as a pause's is: `pausing._pause_failed`;
    its next start boots afresh on its disk), never said running as it was."""
    vm = machine.vm if machine is not None else None
    if vm is None or not vm.alive() or await vm.frozen() is not True:
        return state_after(fleet, computer_id, machine, kept)
    try:
        await vm.continue_running()
        still = await vm.frozen() is True
    except Exception as exc:  # whatever the host said: it stays frozen as far as we know
        log.warning("%s stayed frozen after a failed %s: %s", computer_id, verb, exc)
        still = True
    if not still:
        fleet.record(
            computer_id,
            None,
            "computer.continued",
            f"its vCPUs, stopped for the {verb} and left stopped by its failure, run again",
        )
        return state_after(fleet, computer_id, machine, kept)
    fleet.machines.pop(computer_id, None)
    try:  # of no use frozen, and in the way of the start that follows (as a restart ends it)
        await vm.kill()
        now = "its VM stayed frozen (its vCPUs could not be run again) and was ended"
        then = "start it again (it boots afresh on its disk)"
    except Exception as exc:
        log.warning("%s, left frozen, could not be ended: %s", computer_id, exc)
        now, then = "its VM stayed frozen (its vCPUs could not be run again)", "delete it"
    said = f"{verb} failed: {now}: the computer is in error"
    fleet.record(computer_id, State.ERROR, "computer.error", said, last_error=said)
    return f"{kept}; {now}: the computer is in error; {then}"


def state_after(fleet: Fleet, computer_id: str, machine: Machine | None, kept: str) -> str:
    """What a failed snapshot or fork left, for its error: what was kept, and the source's state
    now (running as it was, or stopped because its VM died). A take that failed on the host
    goes through `state_after_failure` first."""
    row = fleet.by_id(computer_id)
    state = row.state if row is not None else "deleted"
    if machine is None:
        return f"{kept}; the computer is {state}, as it was"
    if state == State.RUNNING:
        return f"{kept}; the computer is still running as it was"
    return f"{kept}; its VM died: the computer is {state}, its disk kept"


async def delete(fleet: Fleet, org: Org, ref: str) -> SnapshotRow:
    """Remove a snapshot. Computers made from it keep working: the layers their disks stand on
    stay until nothing references them."""
    snap = get(fleet, org, ref)
    forgotten = fleet.remote is not None and fleet.remote.forgotten(snap.host_id)
    try:  # on a host forgotten as dead: its record goes (a host that came back deletes it)
        if not forgotten:
            await fleet.host_at(snap.host_id).delete_snapshot(snap.id)
    except HostError as exc:  # the record stays: a second delete tries again
        raise from_host(exc, "snapshot delete", snap.computer_id) from exc
    _drop(fleet, snap.id)
    with fleet.db.session() as s:
        ev = repo.add_event(
            s,
            snap.org_id,
            snap.computer_id,
            "snapshot.deleted",
            f"snapshot {snap.id} deleted",
            {"snapshot": snap.id},
        )
    fleet.bus.publish(ev)
    return snap
