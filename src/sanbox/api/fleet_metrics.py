"""`GET /metrics`: fleet-level series for Prometheus (`prometheus_client`, a registry per app),
read by a host-admin key or the operator's scrape token (`SANBOX_METRICS_TOKEN`). Never a label
per org or per computer: what one tenant used is the usage API's, not the operator's dashboards'.

Gauges are read from the store and the host at scrape time (computers by state, what running
computers hold, what template builds' VMs hold, pools, the room left for guest memory and disks);
counters are kept as things happen (creates, error answers by code, egress denials)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from ..control.computers import Computers
from ..control.keys import require_host_admin
from ..control.quotas import COMPUTE
from ..control.states import State
from ..store.fleet_models import BuildVmRow
from ..store.models import ComputerRow, EventRow, PoolRow
from .auth import authenticate, bearer_token

router = APIRouter(include_in_schema=False)
MIB = 1024 * 1024


class FleetCollector(Collector):
    """The gauges, read afresh at every scrape."""

    def __init__(self, computers: Computers) -> None:
        self.computers = computers

    def collect(self) -> Iterator[Metric]:
        fleet = self.computers.fleet
        with fleet.db.session() as s:
            by_state = dict(
                s.execute(select(ComputerRow.state, func.count()).group_by(ComputerRow.state)).all()
            )
            vcpus, memory = s.execute(
                select(
                    func.coalesce(func.sum(ComputerRow.vcpus), 0),
                    func.coalesce(func.sum(ComputerRow.memory_mib), 0),
                ).where(ComputerRow.state.in_(COMPUTE))
            ).one()
            builds, build_vcpus, build_memory = s.execute(
                select(
                    func.count(),
                    func.coalesce(func.sum(BuildVmRow.vcpus), 0),
                    func.coalesce(func.sum(BuildVmRow.memory_mib), 0),
                )
            ).one()
            members = s.scalar(select(func.count()).where(ComputerRow.pool.is_not(None)))
            wanted = s.scalar(select(func.coalesce(func.sum(PoolRow.size), 0)))
        states = GaugeMetricFamily("sanbox_computers", "Computers by state", labels=["state"])
        for state in State:
            states.add_metric([state.value], int(by_state.get(state.value, 0)))
        yield states
        yield GaugeMetricFamily(
            "sanbox_running_vcpus", "vCPUs of computers with compute", value=int(vcpus)
        )
        yield GaugeMetricFamily(
            "sanbox_running_memory_bytes",
            "Memory of computers with compute",
            value=int(memory) * MIB,
        )
        yield GaugeMetricFamily(
            "sanbox_build_vms", "VMs template builds run (build and readiness)", value=int(builds)
        )
        yield GaugeMetricFamily(
            "sanbox_build_vcpus", "vCPUs of template builds' VMs", value=int(build_vcpus)
        )
        yield GaugeMetricFamily(
            "sanbox_build_memory_bytes",
            "Memory of template builds' VMs",
            value=int(build_memory) * MIB,
        )
        yield GaugeMetricFamily(
            "sanbox_pool_members", "Warm-pool members (unclaimed)", value=int(members or 0)
        )
        yield GaugeMetricFamily(
            "sanbox_pool_size", "Warm-pool members wanted, all pools", value=int(wanted or 0)
        )
        ram, disk = fleet.runtime.room()
        yield GaugeMetricFamily(
            "sanbox_capacity_memory_bytes",
            "Room left for guest memory and its hypervisors' own",
            value=max(0, ram.spare),
        )
        yield GaugeMetricFamily(
            "sanbox_capacity_disk_bytes",
            "Room left for disks on the data filesystem",
            value=0 if disk is None else max(0, disk.spare),
        )
        yield GaugeMetricFamily("sanbox_capacity_vcpus", "Host CPUs", value=fleet.capacity.cpus)


class FleetMetrics:
    def __init__(self, computers: Computers) -> None:
        self.registry = CollectorRegistry()
        self.creates = Counter(
            "sanbox_computer_creates", "Computers created (records made)", registry=self.registry
        )
        self.failures = Counter(
            "sanbox_failures", "Error answers by code", ["code"], registry=self.registry
        )
        self.denials = Counter(
            "sanbox_egress_denials",
            "Egress connections and lookups denied",
            registry=self.registry,
        )
        self.registry.register(FleetCollector(computers))
        computers.fleet.bus.taps.append(self.saw)

    def saw(self, ev: EventRow) -> None:
        """Count an event as it is published."""
        if ev.type == "computer.creating":
            self.creates.inc()
        elif ev.type == "network.denied":
            data = ev.data or {}
            self.denials.inc(1 + int(data.get("repeats", 0) or 0) + int(data.get("others", 0) or 0))

    def failed(self, code: str) -> None:
        self.failures.labels(code).inc()


def count_failure(request: Any, code: str) -> None:
    """An error answer, counted by its stable code (a fixed set: no tenant-made label)."""
    metrics: FleetMetrics | None = getattr(request.app.state, "fleet_metrics", None)
    if metrics is not None:
        metrics.failed(code)


def _allowed(request: Request) -> None:
    token = request.app.state.settings.metrics_token
    given = bearer_token(request)
    if token and given and hmac.compare_digest(token.encode(), given.encode()):
        return
    require_host_admin(authenticate(request), "reading /metrics")


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    _allowed(request)
    fm: FleetMetrics = request.app.state.fleet_metrics
    body = await asyncio.to_thread(generate_latest, fm.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
