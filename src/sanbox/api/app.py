"""The FastAPI application: store, host runtime, computer service, reconciler and watcher, wired
in the lifespan; routers under /v1; errors in one shape."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from .. import __version__
from ..control.events import EventBus
from ..control.idle import IdleWatcher
from ..control.network import NetworkService
from ..control.reconciler import Reconciler
from ..control.service import ComputerService
from ..host.egress.gateway import EgressGateway
from ..host.egress.resolver import Resolver, system_upstream
from ..host.runtime import HostRuntime
from ..store import Database
from . import errors, redact
from .bootstrap import bootstrap
from .published import PublishedPorts
from .routes import admin, computers, events, exec, files, host, images, network
from .settings import ServerSettings

log = logging.getLogger(__name__)


def create_app(settings: ServerSettings, runtime: HostRuntime | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.layout.ensure()
        db = Database(settings.db_url)
        await asyncio.to_thread(db.migrate)
        app.state.first_key = bootstrap(db, settings.url, settings.client_config)
        host_runtime = runtime or HostRuntime(settings.layout)
        service = ComputerService(db, host_runtime, EventBus())
        network = NetworkService(service)
        if host_runtime.network is not None:
            resolver = Resolver(settings.upstream or system_upstream())
            service.egress = EgressGateway(resolver, network.denied)
        app.state.settings, app.state.network = settings, network
        reconciler = Reconciler(service)
        report = await reconciler.reconcile()
        log.info("reconciled: %s", report)
        app.state.db, app.state.service, app.state.reconcile_report = db, service, report
        watchers = [
            asyncio.ensure_future(reconciler.watch(settings.watch_interval)),
            asyncio.ensure_future(IdleWatcher(service).watch(settings.watch_interval)),
        ]
        try:
            yield
        finally:
            for watcher in watchers:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if service.egress is not None:
                await service.egress.close()
            await service.close()
            db.close()

    app = FastAPI(
        title="Sanbox",
        version=__version__,
        description="Self-hosted agent computers: persistent, isolated microVMs for AI agents.",
        lifespan=lifespan,
    )
    errors.install(app)
    redact.install()
    for module in (computers, exec, files, network, events, admin, images, host):
        app.include_router(module.router)
    app.add_middleware(PublishedPorts)
    return app
