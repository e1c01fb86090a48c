"""Templates: the built-in ones (`base`: an image recipe in code, everyone's) and the ones an org
builds from a spec (`templates` rows; the build itself is `template_build.py`).

A build is answered at once (the template `building`, or `ready` when nothing changed: same
spec, same files, same base) and runs in the background, one at a time on the host; its log is
`templates/<id>.log` under the data dir (`build_log.py`). A rebuild keeps the template usable: its
computers come from the last good build until the new one is ready; a failed build leaves the
template as it was (or `failed`, if it never built) with the reason and the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from ..fleet.errors import BusyError
from ..fleet.operations import Operation
from ..fleet.placement import Placement
from ..host.door import RECIPES, HostError, PolicyError
from ..store import repo
from ..store.models import Org, SnapshotRow, TemplateRow
from ..templates import fetch_cache
from ..templates.context import Context, ContextError
from ..templates.context_worker import unpack_bounded
from ..templates.keys import descriptions, step_keys
from ..templates.spec import Spec, SpecError
from . import build_place, build_vms, placing, quotas, template_build
from .build_log import BuildLog
from .build_slots import FairSlots
from .errors import (
    ConflictError,
    ControlError,
    InvalidRequestError,
    TooManyBuildsError,
)
from .fleet import Fleet
from .names import check_name
from .template_lookup import get

log = logging.getLogger(__name__)

BUILDS = FairSlots(1)  # builds boot VMs: one at a time on a host, the orgs taking turns
BUILD_TIMEOUT = 4 * 3600.0  # seconds one build may hold its slot: then it failed
MAX_BUILDS_PER_ORG = 2  # an org's builds queued or running at once; more are refused (429)


def builtin(name: str) -> bool:
    return name in RECIPES


@dataclass(frozen=True)
class Builtin:
    """A template built into Sanbox (an image recipe), everyone's."""

    name: str
    allow: list[str]
    idle_timeout: int


def builtins() -> list[Builtin]:
    return [Builtin(n, list(r.allow), r.idle_timeout) for n, r in sorted(RECIPES.items())]


def idle_timeout(fleet: Fleet, org: Org, name: str) -> int:
    """The idle timeout computers of a template get unless they ask otherwise."""
    return RECIPES[name].idle_timeout if builtin(name) else get(fleet, org, name).idle_timeout


def allow(fleet: Fleet, org: Org, name: str) -> list[str]:
    """The egress allowlist computers of a template get unless they ask otherwise."""
    return list(RECIPES[name].allow if builtin(name) else get(fleet, org, name).allow)


def find(fleet: Fleet, org: Org) -> list[TemplateRow]:
    with fleet.db.session() as s:
        return repo.list_templates(s, org.id)


def log_path(fleet: Fleet, row: TemplateRow) -> Path:
    return fleet.home / "templates" / f"{row.id}.log"


def context_path(fleet: Fleet, template_id: str) -> Path:
    """The build context of the template's last accepted build (what a rebuild builds again)."""
    return fleet.home / "templates" / f"{template_id}.context.tar"


def _keep_context(fleet: Fleet, template_id: str, data: bytes) -> None:
    path = context_path(fleet, template_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


async def rebuild(
    fleet: Fleet, org: Org, ref: str, region: str | None = None
) -> tuple[TemplateRow, bool]:
    """Build the template again from the context its last build was given (no upload): its
    steps' cache keys decide what runs again (a changed Debian archive, a changed base). In
    `region`, from its build there, or from its build elsewhere when it has none there (how a
    template is built in another region)."""
    with fleet.db.session() as s:
        there = repo.templates_named(s, org.id, ref, region) if region is not None else []
    row = there[0] if there else get(fleet, org, ref)
    try:
        data = await asyncio.to_thread(context_path(fleet, row.id).read_bytes)
    except FileNotFoundError:
        raise ConflictError(
            f"template {row.name} keeps no build context (built before rebuilds were kept): "
            "build it from its folder once (`sanbox template build DIR`)",
            "no_build_context",
        ) from None
    return await build(fleet, org, data, row.name, row.region if region is None else region)


def packages_path(fleet: Fleet, template_id: str) -> Path:
    """The packages of the template's last build, by version (`template_build.record_packages`)."""
    return fleet.home / "templates" / f"{template_id}.packages.json"


async def _context(data: bytes) -> Context:
    """The upload read in a bounded worker process (never on this loop)."""
    try:
        return await unpack_bounded(data)
    except SpecError as exc:
        raise InvalidRequestError(str(exc), "invalid_spec") from exc
    except ContextError as exc:
        raise InvalidRequestError(str(exc), "invalid_context") from exc


def _start(fleet: Fleet, org: Org, spec: Spec, region: str) -> tuple[template_build.Start, str]:
    """What the build boots from, and its part of the cache keys (a region's are its own)."""
    if builtin(spec.base):
        image = fleet.image_for(spec.base)
        return template_build.Start(image, None), f"image:{image.build_id}" + (
            f"@{region}" if region else ""
        )
    base = get(fleet, org, spec.base, region)
    if base.snapshot_id is None or base.image is None:
        raise ConflictError(
            f"base template {base.name} has not been built yet: build it first",
            "template_building",
        )
    image = fleet.image_for(base.name, base.image)
    return template_build.Start(image, base.snapshot_id), f"snapshot:{base.snapshot_id}"


def _digest(keys: list[str], spec: Spec) -> str:
    """The template as built and as its computers get it: the steps' last key and the rest."""
    body = json.dumps([keys[-1], spec.settings_digest()])
    return hashlib.sha256(body.encode()).hexdigest()


def _check_policy(fleet: Fleet, spec: Spec) -> None:
    for what, rules in (("allow", spec.allow), ("build.allow", spec.build_allow)):
        try:
            fleet.reach.policy(list(rules))
        except PolicyError as exc:
            raise InvalidRequestError(f"{what}: {exc}", "invalid_rule") from exc


async def build(
    fleet: Fleet, org: Org, data: bytes, name: str | None = None, region: str | None = None
) -> tuple[TemplateRow, bool]:
    """Start building the template in `data` (a context tar) in `region` (build_place.py: None
    is the org's home region, or this server's own host). Returns its record and whether a
    build runs (False: it is up to date)."""
    ctx = await _context(data)
    spec = ctx.spec
    name = name or spec.name
    if name is None:
        raise InvalidRequestError(
            "name the template: `name = ...` in the spec, or --name", "invalid_spec"
        )
    check_name(name, "template")
    if builtin(name):
        raise ConflictError(f"{name} is a built-in template: pick another name", "name_taken")
    if spec.base == name:
        raise InvalidRequestError(f"template {name} cannot be its own base", "invalid_spec")
    _check_policy(fleet, spec)
    region = build_place.region_of(fleet, org, region)
    start, start_key = _start(fleet, org, spec, region)
    keys = step_keys(org.id, start_key, spec, ctx.files)
    digest = _digest(keys, spec)
    op: Operation | None = None  # begun with the `building` record, ended by the build
    queued = False
    try:
        with fleet.db.session() as s:
            row = next(iter(repo.templates_named(s, org.id, name, region)), None)
            if row is not None and row.state == "building":
                raise ConflictError(
                    f"template {name} is being built: wait for it", "template_building"
                )
            if row is not None and row.state == "ready" and row.digest == digest:
                return row, False
            building = sum(t.state == "building" for t in repo.list_templates(s, org.id))
            if building >= MAX_BUILDS_PER_ORG:
                raise TooManyBuildsError(
                    f"this org has {building} template builds queued or running, the most it "
                    "may: wait for one to end (`sanbox template logs NAME -f`)"
                )
            # refused up front when its VMs would take the org past a quota (each VM's own
            # record holds its room when it starts: build_vms.recorded)
            quotas.check(s, org.id, build_vms.needs(spec, start.image, fleet.capacity.cpus))
            template_id = row.id if row is not None else repo.new_id("tpl_")
            op = _begin(fleet, template_id, name)
            if row is None:
                row = TemplateRow(
                    id=template_id,
                    org_id=org.id,
                    name=name,
                    region=region,
                    state="building",
                    base=spec.base,
                    spec=ctx.spec_text,
                    digest=digest,
                    vcpus=spec.vcpus,
                    memory_mib=spec.memory_mib,
                )
                s.add(row)
            row.state, row.error = "building", None
            s.flush()
        queued = True
        await asyncio.to_thread(_keep_context, fleet, row.id, data)
        blog = BuildLog(log_path(fleet, row))
        blog.start()
        blog.event("queued", message=f"building {name}")
    except BaseException as exc:
        if op is not None:
            fleet.operations.finish(op.op_id, f"{type(exc).__name__}: {exc}"[:500])
        if queued:
            _failed(fleet, template_id, f"the build could not be queued: {exc}", None)
        raise
    fleet.spawn(_carried(fleet, op, _build(fleet, org, row.id, ctx, start, keys, digest, blog)))
    return row, True


def _begin(fleet: Fleet, template_id: str, name: str) -> Operation:
    """The build's operation, by the template's id, begun with its `building` record and carried
    until the build ends (queued too): another API node's restart leaves a build it holds
    alone (reconciler.py), and two nodes cannot build one template at once."""
    try:
        return fleet.operations.begin(template_id, "build", None, fleet.node)
    except BusyError:
        raise ConflictError(
            f"template {name} is being built: wait for it", "template_building"
        ) from None


async def _carried(fleet: Fleet, op: Operation, build: Coroutine[Any, Any, None]) -> None:
    async with fleet.carrying(op):
        await build


async def _build(
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
        await asyncio.to_thread(fetch_cache.prune, cache)  # old and over-size bundles go
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
            _failed(fleet, template_id, f"no host of region {region} to build on: {why}", blog)
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
            _failed(fleet, template_id, f"{builder.doing}: the build ran over {limit}", blog)
            return
        except template_build.BuildFailed as exc:
            _failed(fleet, template_id, str(exc), blog)
            return
        except Exception as exc:  # never a template left `building`
            log.exception("build of %s failed", template_id)
            _failed(fleet, template_id, template_build.unexpected(builder, exc), blog)
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
            await _drop_snapshot(fleet, old_ready)


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


def _failed(fleet: Fleet, template_id: str, reason: str, blog: BuildLog | None) -> None:
    with fleet.db.session() as s:
        row = s.get(TemplateRow, template_id)
        if row is None:
            return
        row.state = "ready" if row.snapshot_id is not None else "failed"
        row.error = reason
    if blog is not None:
        blog.event("done", state="failed", message=reason)


async def _drop_snapshot(fleet: Fleet, snapshot_id: str) -> None:
    with fleet.db.session() as s:
        host_id = s.scalar(select(SnapshotRow.host_id).where(SnapshotRow.id == snapshot_id))
    with contextlib.suppress(HostError, ControlError):  # a host that does not answer: the
        await fleet.host_at(host_id).delete_snapshot(snapshot_id)  # reconciler's to drop
    with fleet.db.session() as s:
        if (row := s.get(SnapshotRow, snapshot_id)) is not None:
            s.delete(row)


async def delete(fleet: Fleet, org: Org, ref: str, region: str | None = None) -> TemplateRow:
    """Remove a template (its build in `region`) and its ready snapshot. Its computers keep
    working (their disks keep the layers they stand on); its build steps stay cached for the
    org's next build."""
    row = get(fleet, org, ref, region)
    with fleet.db.session() as s:  # the record first, as it is now: a build queued since wins
        live = s.get(TemplateRow, row.id, with_for_update=True)
        if live is not None and live.state == "building":
            raise ConflictError(
                f"template {row.name} is being built: wait for it", "template_building"
            )
        ready = live.ready_snapshot_id if live is not None else row.ready_snapshot_id
        if live is not None:
            s.delete(live)
    if ready is not None:  # a build of its name now makes a new record
        await _drop_snapshot(fleet, ready)
    log_path(fleet, row).unlink(missing_ok=True)
    packages_path(fleet, row.id).unlink(missing_ok=True)
    context_path(fleet, row.id).unlink(missing_ok=True)
    return row
