"""`Computers`: the control plane's one front door. The API, the MCP endpoint (through the API),
the reconciler and the idle and deadline watchers hold this object; its methods are the verbs a
user sees, each checked against the computer's state, run under its lock where it changes it, and
recorded as events. The verbs live in their own modules (`create`, `lifecycle`, `pausing`, `guest`,
`network`; those inside the guest come from `GuestVerbs`); the plumbing they share is the `Fleet`
below them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fleet.hosts import LeasePolicy
from ..host.door import (
    ConnectionBudget,
    Denial,
    Host,
    Reach,
    Resolver,
)
from ..store import Database, repo
from ..store.models import ComputerRow, Org, SnapshotRow, TemplateRow
from . import (
    build_cache,
    deadline_acts,
    forks,
    images,
    lifecycle,
    moving,
    network,
    pausing,
    snapshot_moves,
    snapshots,
    template_lookup,
    templates,
)
from . import create as creating
from .build_uploads import BuildUploads
from .capacity import Capacity
from .create import CreateRequest
from .events import EventBus, event_dict
from .fleet import Fleet
from .fleet_egress import FleetEgress
from .guest_verbs import GuestVerbs
from .hosts import FleetHosts
from .pools import MAX_MEMBERS, MAX_POOLS, Pools, PoolStatus
from .secret_book import SecretBook
from .secrets import MAX_SECRETS, Secrets
from .usage import Meter, Usage
from .usage.report_slots import PER_ORG as REPORTS_PER_ORG
from .usage.report_slots import TOTAL as REPORTS_TOTAL
from .usage.report_slots import ReportSlots


@dataclass(frozen=True)
class HostFacts:
    hypervisor: str
    isolation: str
    cpus: int
    memory_mib: int
    data_dir: str
    reflink: bool
    confinement: dict[str, Any]


class Computers(GuestVerbs):
    def __init__(
        self,
        db: Database,
        runtime: Host,
        *,
        home: Path,
        host_lease: LeasePolicy | None = None,
        reach: Reach | None = None,
        resolver: Resolver | None = None,
        egress_max_connections: int = 512,
        capacity: Capacity | None = None,
        secrets_key_file: Path,
        ca_bundle: Path | None = None,
        strict_placeholders: bool = False,
        substitute_any_header: bool = False,
        egress_budget: ConnectionBudget | None = None,
        pool_bounds: tuple[int, int] = (MAX_POOLS, MAX_MEMBERS),  # pools, members per org
        max_secrets: int = MAX_SECRETS,  # per org
        max_templates: int = templates.MAX_TEMPLATES,  # per org
        meter: dict[str, float] | None = None,  # Meter's periods (running_period, ...)
        metering: bool = True,  # usage intervals written with every state change
        usage_reports: tuple[int, int] = (REPORTS_PER_ORG, REPORTS_TOTAL),  # at once: org, all
        fleet_dir: Path | None = None,  # the fleet's CAs, shared by its API nodes
    ) -> None:
        self.fleet = Fleet(db, runtime, EventBus(), home, capacity=capacity, reach=reach)
        self.usage = Usage(
            self.fleet, Meter(self.fleet, **(meter or {})), metering, ReportSlots(*usage_reports)
        )
        book = SecretBook(
            db,
            secrets_key_file,
            ca_bundle,
            strict_placeholders,
            substitute_any_header,
        )
        self.fleet.book = book
        self.secrets = Secrets(self.fleet, book, max_secrets)
        self.pools = Pools(self.fleet, *pool_bounds)
        self.max_templates = max_templates
        self.build_uploads = BuildUploads()  # contexts being read, bounded before any byte is
        fleet_dir = fleet_dir or home / "fleet"  # docs/fleet.md
        self.hosts = FleetHosts(db, fleet_dir, self.fleet.jobs, host_lease)
        self.fleet.remote = self.hosts
        self.hosts.on_change = self._host_changed
        if resolver is not None:
            budget = egress_budget or ConnectionBudget()
            self.fleet.egress = runtime.open_egress(
                resolver,
                self._denied,
                self.fleet.reach,
                egress_max_connections,
                book.interception,
                budget,
                self._org_of,
            )
            self.fleet.far = FleetEgress(
                self.fleet, resolver, self._denied, book.interception, budget, self._org_of
            )
            book.on_change = self.fleet.far.poke

    def unknown_reason(self, row: ComputerRow) -> str | None:
        """Why a computer's state is not known now (its fleet host is suspect, lost or gone)."""
        return self.hosts.unknown_reason(row.host_id)

    def _host_changed(self, host_id: str, name: str, back: bool) -> None:
        """Each computer of a host declared lost, or back, gets an event that says so."""
        with self.fleet.db.session() as s:
            ids = [r.id for r in repo.list_computers(s, None) if r.host_id == host_id]
        event, said = (
            ("computer.reachable", f"its host {name} answers again")
            if back
            else (
                "computer.unknown",
                f"its host {name} is lost: what its VM does now is not known; nothing is "
                "restarted elsewhere",
            )
        )
        for computer_id in ids:
            self.fleet.record(computer_id, None, event, said, {"host": name})

    def _org_of(self, computer_id: str) -> str:
        with self.fleet.db.session() as s:
            row = repo.computer_by_id(s, computer_id)
        return row.org_id if row is not None else ""

    def _denied(self, computer_id: str, denial: Denial) -> None:
        network.denied(self.fleet, computer_id, denial)

    async def close(self) -> None:
        await self.hosts.close()
        if self.fleet.egress is not None:
            await self.fleet.egress.close()
        await self.fleet.close()

    # records ---------------------------------------------------------------------------------

    def get(self, org: Org, ref: str) -> ComputerRow:
        return self.fleet.get(org, ref)

    def find(
        self, org: Org, state: str | None = None, labels: dict[str, str] | None = None
    ) -> list[ComputerRow]:
        """The org's computers, optionally in one state and with all of these labels."""
        return self.fleet.list(org, state, labels)

    def events(self, org: Org, ref: str) -> list[dict[str, Any]]:
        row = self.fleet.get(org, ref)
        with self.fleet.db.session() as s:
            return [event_dict(e) for e in repo.list_events(s, org.id, row.id)]

    def events_after(self, org: Org, after: int) -> list[dict[str, Any]]:
        with self.fleet.db.session() as s:
            return [event_dict(e) for e in repo.events_after(s, org.id, after)]

    @contextlib.asynccontextmanager
    async def subscribe(self, org: Org) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        """The org's events as they are written (a bounded queue: a slow reader misses some)."""
        async with self.fleet.bus.subscribe(org.id) as queue:
            yield queue

    async def console(self, org: Org, ref: str, lines: int) -> list[str]:
        row = self.fleet.get(org, ref)
        return await self.fleet.host_of(row).console_lines(row.id, lines)

    # lifecycle -------------------------------------------------------------------------------

    async def create(
        self, org: Org, req: CreateRequest, idempotency_key: str | None = None, wait: bool = True
    ) -> ComputerRow:
        return await creating.create(
            self.fleet, org, req, idempotency_key, wait, supply=self.pools.claim
        )

    async def start(self, org: Org, ref: str) -> ComputerRow:
        return await lifecycle.start(self.fleet, org, ref)

    async def come_up(self, org: Org, ref: str) -> tuple[ComputerRow, bool]:
        """Running (a transition under way waited for, then resumed or started if at rest), and
        whether it was at rest."""
        return await lifecycle.come_up(self.fleet, org, ref)

    async def stop(
        self, org: Org, ref: str, why: str | None = None, ends_lifetime: bool = False
    ) -> ComputerRow:
        return await lifecycle.stop(self.fleet, org, ref, why, ends_lifetime)

    async def move(
        self, computer_id: str, host: str | None = None, key: str | None = None
    ) -> ComputerRow:
        return await moving.move(self.fleet, computer_id, host, key)

    async def move_snapshot(
        self, snapshot_id: str, host: str | None = None, key: str | None = None
    ) -> SnapshotRow:
        return await snapshot_moves.move_snapshot(self.fleet, snapshot_id, host, key)

    def org_name(self, org_id: str) -> str:
        with self.fleet.db.session() as s:
            org = s.get(Org, org_id)
            return org.name if org is not None else org_id

    async def restart(self, org: Org, ref: str) -> ComputerRow:
        return await lifecycle.restart(self.fleet, org, ref)

    async def update(self, org: Org, ref: str, change: lifecycle.Change) -> ComputerRow:
        return await lifecycle.update(self.fleet, org, ref, change)

    async def delete(self, org: Org, ref: str, why: str = "deleted") -> ComputerRow:
        return await lifecycle.delete(self.fleet, org, ref, why)

    async def pause(
        self, org: Org, ref: str, wake_on_use: bool = False, ends_lifetime: bool = False
    ) -> ComputerRow:
        return await pausing.pause(self.fleet, org, ref, wake_on_use, ends_lifetime)

    async def resume(self, org: Org, ref: str) -> ComputerRow:
        return await pausing.resume(self.fleet, org, ref)

    async def suspend(self, computer_id: str, idle: float) -> ComputerRow | None:
        """The idle watcher's pause; None if the computer changed meanwhile."""
        return await pausing.suspend(self.fleet, computer_id, idle)

    async def enforce_deadline(self, computer_id: str, kind: str) -> str | None:
        """The deadline watcher's stop, delete, pause or suspension, if still due under the
        computer's operation; the action done, or None."""
        return await deadline_acts.enforce(self.fleet, computer_id, kind)

    # prepared state --------------------------------------------------------------------------

    async def snapshot(
        self, org: Org, ref: str, memory: bool = False, name: str | None = None
    ) -> SnapshotRow:
        return await snapshots.take(self.fleet, org, ref, memory, name)

    def snapshots(self, org: Org) -> list[SnapshotRow]:
        return snapshots.find(self.fleet, org)

    def give_snapshot_name(self, org: Org, snapshot_id: str, name: str) -> SnapshotRow:
        return snapshots.give_name(self.fleet, org, snapshot_id, name)

    def get_snapshot(self, org: Org, ref: str) -> SnapshotRow:
        return snapshots.get(self.fleet, org, ref)

    async def delete_snapshot(self, org: Org, ref: str) -> SnapshotRow:
        return await snapshots.delete(self.fleet, org, ref)

    async def fork(
        self,
        org: Org,
        ref: str,
        count: int = 1,
        prefix: str | None = None,
        region: str | None = None,
    ) -> list[ComputerRow]:
        return await forks.fork(self.fleet, org, ref, count, prefix, region)

    # templates ------------------------------------------------------------------------------

    async def rebuild_template(
        self, org: Org, ref: str, region: str | None = None
    ) -> tuple[TemplateRow, bool]:
        return await templates.rebuild(self.fleet, org, ref, region, self.max_templates)

    async def build_template(
        self, org: Org, context: bytes, name: str | None = None, region: str | None = None
    ) -> tuple[TemplateRow, bool]:
        return await templates.build(self.fleet, org, context, name, region, self.max_templates)

    # warm pools -----------------------------------------------------------------------------

    def set_pool(self, org: Org, template: str, size: int) -> PoolStatus:
        pool = self.pools.set(org, template, size)
        return next(p for p in self.pools.status(org) if p.pool.id == pool.id)

    def pool_status(self, org: Org) -> list[PoolStatus]:
        return self.pools.status(org)

    def builtin_templates(self) -> list[templates.Builtin]:
        return templates.builtins()

    def templates(self, org: Org) -> list[TemplateRow]:
        return templates.find(self.fleet, org)

    def get_template(self, org: Org, ref: str, region: str | None = None) -> TemplateRow:
        return template_lookup.get(self.fleet, org, ref, region)

    async def delete_template(self, org: Org, ref: str, region: str | None = None) -> TemplateRow:
        return await templates.delete(self.fleet, org, ref, region)

    def template_log(self, row: TemplateRow) -> Path:
        return templates.log_path(self.fleet, row)

    async def prune_build_cache(self, org: Org) -> build_cache.Pruned:
        return await build_cache.prune(self.fleet, org)

    # network ---------------------------------------------------------------------------------

    async def set_allow(self, org: Org, ref: str, rules: list[str]) -> tuple[ComputerRow, int]:
        return await network.set_allow(self.fleet, org, ref, rules)

    def publish(self, org: Org, ref: str, port: int, public: bool) -> ComputerRow:
        return network.publish(self.fleet, org, ref, port, public)

    def unpublish(self, org: Org, ref: str, port: int) -> ComputerRow:
        return network.unpublish(self.fleet, org, ref, port)

    def find_published(self, org_name: str, name: str, port: int) -> tuple[ComputerRow, Org, bool]:
        return network.find_published(self.fleet, org_name, name, port)

    # the host --------------------------------------------------------------------------------

    async def host_facts(self) -> HostFacts:
        data_dir, reflink = self.fleet.runtime.storage()
        hypervisor, isolation = self.fleet.runtime.driver_facts()
        return HostFacts(
            hypervisor=hypervisor,
            isolation=isolation,
            cpus=self.fleet.capacity.cpus,
            memory_mib=self.fleet.capacity.memory_mib,
            data_dir=data_dir,
            reflink=reflink,
            confinement=await asyncio.to_thread(self.fleet.runtime.confinement),
        )

    def image_builds(self) -> list[images.Build]:
        return images.inventory(self.fleet)

    async def prune_image_builds(self) -> list[images.Build]:
        return await images.prune(self.fleet)
