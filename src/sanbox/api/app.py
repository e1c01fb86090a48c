"""The FastAPI application: the store, the host runtime, the control plane (`Computers`), the
reconciler and the watchers, wired in the lifespan; routers under /v1; MCP at /mcp; errors in one
shape."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .. import __version__
from .. import console as web_console
from ..console.sessions import Sessions
from ..control.audit import AuditLog
from ..control.capacity import Capacity
from ..control.computers import Computers
from ..control.deadlines import DeadlineWatcher
from ..control.event_relay import EventRelay
from ..control.fleet_egress import WATCH_EVERY as EGRESS_WATCH
from ..control.idle import IdleWatcher
from ..control.keys import Keys
from ..control.rates import KeyRates
from ..control.reconciler import Reconciler
from ..control.retention import FinishedOperations, Sweeper
from ..control.vm_watcher import VmWatcher
from ..e2b import api as e2b_api
from ..e2b import copies as e2b_copies
from ..e2b import gateway as e2b_gateway
from ..fleet.api_nodes import ApiNodes
from ..fleet.hosts import LeasePolicy
from ..fleet.node_share import NodeShare
from ..host.egress.budget import ConnectionBudget
from ..host.egress.reach import Reach
from ..host.egress.resolver import Resolver, system_upstream
from ..host.machines import console, faults
from ..host.runtime import HostRuntime
from ..mcp.http import McpEndpoint
from ..store import Database
from ..store.models import EventRow
from ..tasks import cancel_and_wait
from . import errors, exec_protocol, redact
from .auditing import AuditTrail
from .bootstrap import bootstrap
from .fleet_metrics import FleetMetrics
from .fleet_metrics import router as metrics_router
from .limits import BodyLimit
from .open_requests import OpenCounts, OpenRequests
from .ports.public_relays import PublicRelays
from .published import PublishedPorts
from .routes import (
    admin,
    audit,
    computers,
    events,
    exec,
    files,
    fleet,
    host,
    images,
    keys,
    network,
    pools,
    secrets,
    snapshots,
    ssh,
    templates,
    usage,
)
from .settings import ServerSettings
from .standing import quiet_lapses

log = logging.getLogger(__name__)


def create_app(
    settings: ServerSettings,
    runtime: HostRuntime | None = None,
    *,
    clock: Callable[[], float] = time.time,  # wall-clock seconds: key expiry, failure windows
) -> FastAPI:
    share = NodeShare()  # how many API nodes share an org's bounds (fleet/api_nodes.py)
    mcp = McpEndpoint(settings.mcp_sessions_per_key, settings.mcp_sessions_per_org, share=share)
    quiet_lapses(logging.getLogger("uvicorn.error"))  # a response cut on purpose is no error

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.layout.ensure()
        db = Database(settings.db_url)
        await asyncio.to_thread(db.migrate)
        app.state.first_key = bootstrap(db, settings.url, settings.client_config)
        rates = KeyRates(settings.key_rate, settings.key_burst, share=share)
        app.state.keys = Keys(db, clock, rates=rates, max_keys=settings.org_max_keys)
        app.state.console_sessions = Sessions(db)  # every node's (docs/console.md)
        retention = timedelta(days=settings.audit_retention_days)
        app.state.audit = AuditLog(db, retention=retention, org_cap=settings.audit_org_cap)
        kept = timedelta(days=settings.event_retention_days)
        app.state.events_kept = Sweeper(db, EventRow, "events", kept, settings.event_org_cap)
        finished = timedelta(days=settings.operation_retention_days)
        app.state.operations_kept = FinishedOperations(db, finished)
        host_runtime = runtime or HostRuntime(settings.layout)
        reach = Reach.of(settings.tenant_private_ranges)
        resolver = Resolver.of_host(settings.upstream or system_upstream(), settings.dns_bounds)
        computers = Computers(
            db,
            host_runtime,
            home=settings.layout.root,
            host_lease=LeasePolicy(settings.host_lease, settings.host_lost_after),
            reach=reach,
            resolver=resolver,
            egress_max_connections=settings.egress_max_connections,
            capacity=Capacity.of_host(settings.disk_overcommit, settings.disk_low_watermark),
            secrets_key_file=settings.secrets_key_file or settings.layout.sealing_key,
            ca_bundle=settings.ca_bundle,
            strict_placeholders=settings.strict_placeholders,
            substitute_any_header=settings.substitute_any_header,
            egress_budget=ConnectionBudget.within_open_files(
                settings.egress_max_connections_per_org, settings.egress_max_connections_total
            ),
            pool_bounds=(settings.org_max_pools, settings.org_max_pool_members),
            max_secrets=settings.org_max_secrets,
            max_templates=settings.org_max_templates,
            meter={
                "running_period": settings.usage_running_period,
                "sample_interval": settings.usage_sample_interval,
            },
            metering=settings.metering,
            usage_reports=(settings.usage_reports_per_org, settings.usage_reports_total),
            fleet_dir=settings.fleet_dir,
        )
        app.state.fleet_metrics = FleetMetrics(computers)
        app.state.settings, app.state.computers = settings, computers
        vm_watcher = VmWatcher(computers)  # made first: its node's life begins before the reconcile
        reconciler = Reconciler(computers)
        report = await reconciler.reconcile()
        log.info("reconciled: %s", report)
        app.state.db, app.state.reconcile_report = db, report
        app.state.vm_watcher = vm_watcher
        app.state.api_nodes = ApiNodes(db, computers.fleet.node, share)
        faults.arm(settings.crash_at)  # test only: after the reconcile, which it must not stop
        computers.pools.start()  # refills warm pools (their members were re-attached above)
        watchers = [
            asyncio.ensure_future(vm_watcher.watch(settings.watch_interval)),
            asyncio.ensure_future(IdleWatcher(computers).watch(settings.watch_interval)),
            asyncio.ensure_future(DeadlineWatcher(computers).watch(settings.watch_interval)),
            asyncio.ensure_future(console.keep_bounded(settings.layout)),
            asyncio.ensure_future(app.state.audit.sweep_every()),
            asyncio.ensure_future(app.state.events_kept.sweep_every()),
            asyncio.ensure_future(app.state.operations_kept.sweep_every()),
            asyncio.ensure_future(computers.hosts.watch(settings.watch_interval)),
        ]
        if computers.fleet.far is not None:  # fleet hosts' egress: denials and convergence
            watchers.append(asyncio.ensure_future(computers.fleet.far.watch(EGRESS_WATCH)))
        if settings.metering:
            watchers.append(asyncio.ensure_future(computers.usage.meter.watch()))
        if db.engine.dialect.name == "postgresql":  # other API nodes may share it: their events
            watchers.append(asyncio.ensure_future(EventRelay(db, computers.fleet.bus).run()))
        try:
            # its tools call this app, in-process; this node's beat counts the nodes sharing
            async with mcp.serving(app), app.state.api_nodes.serving():
                yield
        finally:
            for watcher in watchers:
                await cancel_and_wait(watcher)
            await e2b_gateway.close(app.state)
            await computers.close()
            db.close()

    app = FastAPI(
        title="Sanbox",
        version=__version__,
        description="Self-hosted agent computers: persistent, isolated microVMs for AI agents.",
        lifespan=lifespan,
    )
    errors.install(app)
    exec_protocol.document(app)  # the exec WebSocket's messages
    redact.install()
    routers = (
        computers,
        snapshots,
        templates,
        pools,
        secrets,
        exec,
        files,
        network,
        ssh,
        events,
        admin,
        keys,
        audit,
        images,
        host,
        usage,
        fleet,
    )
    for module in routers:
        app.include_router(module.router)
    app.include_router(metrics_router)  # /metrics, for Prometheus
    app.include_router(e2b_api.router)  # E2B's control API, under /e2b
    app.include_router(e2b_copies.router)  # ... its forks and snapshots
    app.router.routes.append(mcp.route())
    app.router.routes.append(Route("/healthz", _healthz, include_in_schema=False))
    web_console.mount(app)  # the web console at /console (docs/console.md)
    open_requests = OpenCounts(
        settings.open_requests_per_key, settings.open_requests_per_org, share=share
    )
    # innermost: a request holds its place until it has ended
    app.add_middleware(OpenRequests, counts=open_requests)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(AuditTrail)  # around the limit: a refused body is recorded too
    public = PublicRelays(settings.public_port_connections)  # a computer's, however reached
    app.add_middleware(  # published ports are relayed before the limit (their places: their own)
        PublishedPorts, open_requests=open_requests, public=public
    )
    app.add_middleware(  # outermost: E2B's envd and get_host() names (their places: their own)
        e2b_gateway.E2bGateway, open_requests=open_requests, public=public
    )
    return app


async def _healthz(request: Request) -> JSONResponse:
    """Up: answered once the lifespan has started (the database migrated, the computers
    reconciled), and without a key, for a load balancer or a supervisor's readiness check."""
    return JSONResponse({"status": "ok"})
