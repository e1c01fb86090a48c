"""A template build's run, from its `building` record to its end: the operation it holds across
API nodes (`begin`, `carried`: another node's restart leaves it alone), its turn among the
host's builds (`BUILDS`, the orgs taking turns), the host of its region that builds it, the
build engine (`template_build.py`), and the template's record at the end: `ready` with what the
build made, or the reason it failed (a template that built before keeps that build). The
request that queues it is `templates.build`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from sqlalchemy import select

from ..fleet.errors import BusyError
from ..fleet.operations import Operation
from ..fleet.placement import Placement
from ..host.door import HostError
from ..store.models import Org, SnapshotRow, TemplateRow
from ..templates.context import Context
from ..templates.keys import descriptions
from . import build_place, build_vms, placing, template_build
from .build_log import BuildLog
from .build_slots import FairSlots
from .errors import ConflictError, ControlError
from .fleet import Fleet

log = logging.getLogger(__name__)

BUILDS = FairSlots(1)  # builds boot VMs: one at a time on a host, the orgs taking turns
BUILD_TIMEOUT = 4 * 3600.0  # seconds one build may hold its slot: then it failed


def packages_path(fleet: Fleet, template_id: str) -> Path:
    """The packages of the template's last build, by version (`template_build.record_packages`)."""
    return fleet.home / "templates" / f"{template_id}.packages.json"


def begin(fleet: Fleet, template_id: str, name: str) -> Operation:
    """The build's operation, by the template's id, begun with its `building` record and carried
    until the build ends (queued too): another API node's restart leaves a build it holds
    alone (reconciler.py), and two nodes cannot build one template at once."""
    try:
        return fleet.operations.begin(template_id, "build", None, fleet.node)
    except BusyError:
        raise ConflictError(
            f"template {name} is being built: wait for it", "template_building"
        ) from None


async def carried(fleet: Fleet, op: Operation, build: Coroutine[Any, Any, None]) -> None:
    async with fleet.carrying(op):
        await build


async def run(
    fleet: Fleet,
    org: Org,
    template_id: str,
    ctx: Context,
    start: template_build.Start,
    keys: list[str],
    digest: str,
    blog: BuildLog,
) -> None:
    spec = ctx.spec
    async with BUILDS.held(org.id):
        t0 = time.monotonic()
        with fleet.db.session() as s:
            row = s.get(TemplateRow, template_id)
            assert row is not None
            name, region = row.name, row.region
        cache = fleet.home / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        placement: Placement | None = None
        try:
            placement = await asyncio.to_thread(
                _placed, fleet, org, region, start, keys, spec.memory_mib, spec.disk_gib
            )
            builder = template_build.Builder(
                fleet, org, name, ctx, blog, cache, placement.host_id if placement else None
            )
        except Exception as exc:  # no host of its region to build on: nothing was made
            why = exc.message if isinstance(exc, ControlError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, ControlError):
                log.exception("placing the build of %s failed", template_id)
            if placement is not None:
                await asyncio.to_thread(placing.release, fleet, placement)
            failed(fleet, template_id, f"no host of region {region} to build on: {why}", blog)
            return
        if placement is not None:
            blog.output(f"[sanbox] building on host {placement.host_name} of region {region}")
        try:
            builder.packages = packages_path(fleet, template_id)
            async with asyncio.timeout(BUILD_TIMEOUT):  # other orgs' builds wait for the slot
                built = await template_build.run(
                    builder, start.image, start, keys, descriptions(spec)
                )
        except TimeoutError:
            limit = f"{BUILD_TIMEOUT / 3600:g} hours"
            failed(fleet, template_id, f"{builder.doing}: the build ran over {limit}", blog)
            return
        except template_build.BuildFailed as exc:
            failed(fleet, template_id, str(exc), blog)
            return
        except Exception as exc:  # never a template left `building`
            log.exception("build of %s failed", template_id)
            failed(fleet, template_id, template_build.unexpected(builder, exc), blog)
            return
        finally:
            if placement is not None:  # the host's reports count what it runs from now
                await asyncio.to_thread(placing.release, fleet, placement)
        took = time.monotonic() - t0
        with fleet.db.session() as s:
            row = s.get(TemplateRow, template_id)
            assert row is not None
            old_ready = row.ready_snapshot_id
            row.state, row.error, row.digest, row.spec = "ready", None, digest, ctx.spec_text
            row.base, row.image = spec.base, start.image.build_id
            row.snapshot_id, row.ready_snapshot_id = built.snapshot_id, built.ready_snapshot_id
            row.ready_reason = built.ready_reason
            row.vcpus, row.memory_mib, row.disk_gib = (
                spec.vcpus,
                spec.memory_mib,
                spec.disk_gib or 0,
            )
            row.env, row.allow, row.ports = dict(spec.env), list(spec.allow), list(spec.ports)
            row.secrets = dict(spec.secrets)
            row.idle_timeout, row.steps = spec.idle_timeout, len(keys)
            row.cached_steps, row.build_seconds = built.cached_steps, round(took, 2)
        ran = len(keys) - built.cached_steps
        blog.event(
            "done",
            state="ready",
            message=f"{name} built in {took:.1f}s ({ran} step(s) run, {built.cached_steps} reused)",
        )
        if old_ready is not None and old_ready != built.ready_snapshot_id:
            # on its own: the build's operation ends with its record (a rebuild waits on no host)
            fleet.spawn(drop_snapshot(fleet, old_ready))


def _placed(
    fleet: Fleet,
    org: Org,
    region: str,
    start: template_build.Start,
    keys: list[str],
    memory_mib: int,
    disk_gib: int | None,
) -> Placement | None:
    """The room of the build's computer on the host of `region` that builds it (None: region
    "", this server's own host)."""
    if not region:
        return None
    memory = max(build_vms.BUILD_MEMORY_MIB, memory_mib)
    disk = disk_gib or build_vms.disk_of(start.image)
    build = start.image.build_id
    return build_place.place(fleet, region, start.snapshot_id, build, keys, org, memory, disk)


async def end_abandoned(fleet: Fleet) -> None:
    """Builds nobody runs any more: their API node gave no sign of life, and its operation was
    swept as abandoned (the node that sweeps operations calls this after the sweep). Each
    template still `building` fails (kept as it was if it built before), and the VMs recorded
    for such builds end (`build_vms.end_unheld`). A build that ends meanwhile wrote its record
    before it finished its operation, so none is failed that ended well."""
    with fleet.db.session() as s:
        c = TemplateRow.__table__.c
        found = s.execute(select(c.id).where(c.state == "building")).scalars().all()
    for template_id in found:
        if running(fleet, template_id):
            continue
        why = "the API node that ran the build stopped answering: build it again"
        with fleet.db.session() as s:
            row = s.get(TemplateRow, template_id, with_for_update=True)
            if row is None or row.state != "building":
                continue
            row.state, row.error = ("ready" if row.snapshot_id is not None else "failed"), why
        log.warning("template %s: %s", template_id, why)
    await build_vms.end_unheld(fleet, functools.partial(running_named, fleet))


def running(fleet: Fleet, template_id: str) -> bool:
    """Whether the template's build runs (its operation is incomplete), on any API node."""
    op = fleet.operations.incomplete(template_id)
    return op is not None and op.kind == "build"


def running_named(fleet: Fleet, org_id: str, name: str) -> bool:
    """Whether a build of the org's template `name` (in any region) runs."""
    with fleet.db.session() as s:
        c = TemplateRow.__table__.c
        ids = s.execute(select(c.id).where(c.org_id == org_id, c.name == name)).scalars().all()
    return any(running(fleet, template_id) for template_id in ids)


def failed(fleet: Fleet, template_id: str, reason: str, blog: BuildLog | None) -> None:
    with fleet.db.session() as s:
        row = s.get(TemplateRow, template_id)
        if row is None:
            return
        row.state = "ready" if row.snapshot_id is not None else "failed"
        row.error = reason
    if blog is not None:
        blog.event("done", state="failed", message=reason)


async def drop_snapshot(fleet: Fleet, snapshot_id: str) -> None:
    with fleet.db.session() as s:
        host_id = s.scalar(select(SnapshotRow.host_id).where(SnapshotRow.id == snapshot_id))
    with contextlib.suppress(HostError, ControlError):  # a host that does not answer: the
        await fleet.host_at(host_id).delete_snapshot(snapshot_id)  # reconciler's to drop
    with fleet.db.session() as s:
        if (row := s.get(SnapshotRow, snapshot_id)) is not None:
            s.delete(row)
