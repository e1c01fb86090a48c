"""Provisioning a created computer on its host (create.py inserts its record first): placed on a
fleet host when there is one (placing.py; a host without room after all is given back and
another of its region tried, `PLACE_TRIES` in all), then made there: booted from its image, or
started from a snapshot or a template's ready snapshot. A failed provision leaves no VM, no disk,
no folder, and no record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from ..fleet.placement import Placement
from ..host.door import (
    AgentError,
    AgentRouteError,
    HostError,
    HostFullError,
    Image,
    MemoryOutcome,
)
from ..store.models import ComputerRow, SnapshotRow
from . import placing, readiness
from .capacity import Hold
from .errors import ControlError, HostUnavailableError
from .fleet import Fleet
from .host_errors import agent_unavailable, from_host
from .states import State

log = logging.getLogger(__name__)

PLACE_TRIES = 3  # hosts a new computer may be placed on before its create fails


@dataclass(frozen=True)
class Plan:
    """What a valid request resolves to: the values the record and the host get."""

    template: str
    image: Image
    vcpus: int
    memory_mib: int
    disk_gib: int
    env: dict[str, str]
    allow: list[str]
    idle_timeout: int
    snapshot: SnapshotRow | None = None
    origin: str | None = None  # the snapshot, or the computer a fork came from
    hold: Hold | None = None  # the room admission promised it, until its files exist
    from_template: bool = False  # an org's template: `snapshot` is its ready snapshot or disk
    booted_because: str | None = None  # from a template, but not restored: why
    ports: tuple[int, ...] = ()  # published (private) from the start: the template's
    secrets: tuple[tuple[str, str | None], ...] = ()  # bound at insert: the template's, the own
    placed: bool = False  # on a fleet host, chosen at provision (placing.py)
    host_id: str | None = None  # a fork's: its source's host
    region: str | None = None


def release(plan: Plan) -> None:
    if plan.hold is not None:
        plan.hold.release()


async def provision(fleet: Fleet, row: ComputerRow, plan: Plan) -> ComputerRow:
    try:
        return await _provision(fleet, row, plan)
    finally:
        release(plan)  # its disk and RAM file exist now (or never will): measured from here


async def _placed(
    fleet: Fleet, row: ComputerRow, plan: Plan, refused: list[str]
) -> Placement | None:
    """Put a placed create on its host, none of the `refused` ones (None: it runs on this
    server's own); refused, nothing of it stays."""
    if not plan.placed:
        return None
    snap_host = plan.snapshot.host_id if plan.snapshot else None
    try:
        placement = await asyncio.to_thread(
            placing.place, fleet, row, plan.disk_gib, snap_host, plan.snapshot is not None, refused
        )
    except ControlError as exc:
        fleet.remove_record(row.id, f"create failed: {exc.message}")
        raise
    said = f"placed on host {placement.host_name}"
    fleet.record(row.id, None, "computer.placed", said, placement.event_data())
    return placement


class _Refused(Exception):
    """The host a create was placed on had no room for it after all (host_full)."""


async def _provision(fleet: Fleet, row: ComputerRow, plan: Plan) -> ComputerRow:
    """Place and make it; a host that refuses a new computer for capacity is given back and
    another host of its region tried (PLACE_TRIES in all; a copy goes where its data is)."""
    async with fleet.operating(row.id, "create"):
        refused: list[str] = []
        while True:
            placement = await _placed(fleet, fleet.by_id(row.id) or row, plan, refused)
            retry = placement is not None and plan.snapshot is None
            retry = retry and len(refused) + 1 < PLACE_TRIES
            try:
                return await _provision_on(fleet, fleet.by_id(row.id) or row, plan, retry)
            except _Refused:
                assert placement is not None
                refused.append(placement.host_id)
                said = f"host {placement.host_name} has no room for it: placing it again"
                fleet.record(row.id, None, "computer.refused", said, {"host": placement.host_name})
            finally:
                if placement is not None:  # the host's next report counts what it runs
                    await asyncio.to_thread(placing.release, fleet, placement)


async def _provision_on(
    fleet: Fleet, row: ComputerRow, plan: Plan, retry: bool = False
) -> ComputerRow:
    """Make it on its host; `retry`: a host_full refusal raises _Refused, the record kept."""
    spec = fleet.spec(row, plan.disk_gib)
    try:
        host = fleet.host_of(row)
    except ControlError as exc:  # its host cannot be reached now: nothing was made
        fleet.remove_record(row.id, f"create failed: {exc.message}")
        raise
    try:
        if plan.snapshot is None:
            machine, disk = await host.create(spec, plan.image)
            how, data = f"disk {disk.method}", {"disk_clone": disk.method}
        else:
            machine, outcome = await host.create_from_snapshot(spec, plan.image, plan.snapshot.id)
            if plan.from_template:
                how, data = _from_template_said(plan, outcome)
            else:
                how, data = _from_snapshot_said(plan.snapshot, outcome)
    except HostFullError as exc:  # nothing was made there
        if retry:
            log.info("host of %s refused it: %s", row.id, exc)
            raise _Refused from exc
        fleet.remove_record(row.id, f"create failed: {from_host(exc, 'create', row.id).message}")
        raise from_host(exc, "create", row.id) from exc
    except (HostError, OSError, AgentError) as exc:  # AgentError: its new guest not reached
        if isinstance(exc, HostError):
            error = from_host(exc, "create", row.id)
        elif isinstance(exc, AgentRouteError):
            error = HostUnavailableError(f"create failed: its {exc}; try again shortly")
        elif isinstance(exc, AgentError):
            error = agent_unavailable(exc, row.id, "create failed: ")
        else:
            error = ControlError(f"create failed: {exc.strerror or exc}", "host_error")
        log.warning("create of %s failed: %s", row.id, exc)
        with contextlib.suppress(Exception):  # nothing of it stays: no half-made computer
            await host.destroy(row.id)
        fleet.remove_record(row.id, f"create failed: {error.message}")
        raise error from exc
    (unready,) = await readiness.came_up_settled(fleet, [(row, machine)])
    fields: dict[str, Any] = {"hypervisor": host.driver_facts()[0]}
    if "memory" in data:
        fields |= {"memory": data["memory"], "memory_reason": data.get("memory_reason")}
    said = f"running ({machine.isolation}, {how})"
    fields |= {"isolation": machine.isolation, "last_error": None, "identity_pending": None}
    told: dict[str, Any] = {"isolation": machine.isolation, **data}
    running = fleet.record(row.id, State.RUNNING, "computer.running", said, told, **fields)
    if unready is not None:
        readiness.not_ready(fleet, row.id, unready)
    return running


def _from_template_said(plan: Plan, outcome: MemoryOutcome | None) -> tuple[str, dict[str, Any]]:
    """How a computer of an org's template started: restored from its ready snapshot, or booted
    on its built disk (and why)."""
    if outcome is not None and outcome.restored:
        return "start: restored", {"start": "restored", "memory": "restored"}
    why = plan.booted_because or (outcome.reason if outcome is not None else None) or "booted"
    said = {"start": "booted", "memory": "lost", "memory_reason": f"booted: {why}"}
    return f"start: booted ({why})", said


def _from_snapshot_said(
    snap: SnapshotRow, outcome: MemoryOutcome | None
) -> tuple[str, dict[str, Any]]:
    """What a create from a snapshot did with memory, as resume says it."""
    data: dict[str, Any] = {"snapshot": snap.id}
    if outcome is None:  # a disk-only snapshot: booted
        return f"from snapshot {snap.id}, booted on its disk", data
    if outcome.restored:
        return f"from snapshot {snap.id}; memory: restored", {**data, "memory": "restored"}
    data.update(memory="lost", memory_reason=outcome.reason)
    return f"from snapshot {snap.id}; memory: {outcome}, booted fresh on its disk", data
