"""Templates: the built-in ones (`base`: an image recipe in code, everyone's) and the ones an org
builds from a spec (`templates` rows; the build itself is `template_build.py`).

A build is answered at once (the template `building`, or `ready` when nothing changed: same
spec, same files, same base) and runs in the background (`build_run.py`), one at a time on the
host; its log is
`templates/<id>.log` under the data dir (`build_log.py`). A rebuild keeps the template usable: its
computers come from the last good build until the new one is ready; a failed build leaves the
template as it was (or `failed`, if it never built) with the reason and the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..fleet.operations import Operation
from ..host.door import RECIPES, PolicyError
from ..store import repo
from ..store.models import Org, TemplateRow
from ..templates.context import Context, ContextError
from ..templates.context_worker import unpack_bounded
from ..templates.keys import step_keys
from ..templates.spec import Spec, SpecError
from . import build_layers, build_place, build_run, build_vms, quotas, template_build
from .build_log import BuildLog
from .errors import (
    ConflictError,
    InvalidRequestError,
    TooManyBuildsError,
)
from .fleet import Fleet
from .names import check_name
from .template_lookup import get

log = logging.getLogger(__name__)

MAX_BUILDS_PER_ORG = 2  # an org's builds queued or running at once; more are refused (429)
# an org's templates, every region's build and every state counted: each keeps its build
# context (up to 64 MiB), log and package list in the server's home (SANBOX_ORG_MAX_TEMPLATES)
MAX_TEMPLATES = 100


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
    """Written 0600: a tenant's files, readable by the server alone (not by the unprivileged
    fetch user, which any tenant's package fetch runs as, nor by anyone else on the host)."""
    path = context_path(fleet, template_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), 0o600)  # a .tmp a crash left kept the mode it was made with
        out.write(data)
    os.replace(tmp, path)


async def rebuild(
    fleet: Fleet, org: Org, ref: str, region: str | None = None, most: int = MAX_TEMPLATES
) -> tuple[TemplateRow, bool]:
    """Build the template again from the context its last build was given (no upload): its
    steps' cache keys decide what runs again (a changed Debian archive, a changed base). In
    `region`, from its build there, or from its build elsewhere when it has none there (how a
    template is built in another region)."""
    with fleet.db.session() as s:
        there = repo.templates_named(s, org.id, ref, region) if region is not None else []
    row = there[0] if there else get(fleet, org, ref)
    if row.state == "building" and region in (None, row.region):  # refused before its context
        # is read and unpacked (a build in another region is another record)
        raise ConflictError(f"template {row.name} is being built: wait for it", "template_building")
    try:
        data = await asyncio.to_thread(context_path(fleet, row.id).read_bytes)
    except FileNotFoundError:
        raise ConflictError(
            f"template {row.name} keeps no build context (built before rebuilds were kept): "
            "build it from its folder once (`sanbox template build DIR`)",
            "no_build_context",
        ) from None
    return await build(fleet, org, data, row.name, row.region if region is None else region, most)


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


def _room_for_one_more(s: Session, org: Org, most: int) -> None:
    held = s.scalar(select(func.count()).where(TemplateRow.org_id == org.id)) or 0
    if held >= most:
        raise InvalidRequestError(
            f"org {org.name} has {held} templates, the most it may (each keeps its build "
            "context): delete one it no longer needs (`sanbox template ls`, `sanbox template "
            "rm NAME`) first",
            "too_many_templates",
        )


def _check_policy(fleet: Fleet, spec: Spec) -> None:
    for what, rules in (("allow", spec.allow), ("build.allow", spec.build_allow)):
        try:
            fleet.reach.policy(list(rules))
        except PolicyError as exc:
            raise InvalidRequestError(f"{what}: {exc}", "invalid_rule") from exc


async def build(
    fleet: Fleet,
    org: Org,
    data: bytes,
    name: str | None = None,
    region: str | None = None,
    most: int = MAX_TEMPLATES,
) -> tuple[TemplateRow, bool]:
    """Start building the template in `data` (a context tar) in `region` (build_place.py: None
    is the org's home region, or this server's own host). Returns its record and whether a
    build runs (False: it is up to date). A new record is refused past `most` of the org's."""
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
    starts_from = build_layers.start_disk(fleet.db, start.snapshot_id)
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
            needs = build_vms.needs(spec, start.image, fleet.capacity.cpus, starts_from)
            quotas.check(s, org.id, needs)
            if row is None:  # a new record (the org's row is locked by the quota's check)
                _room_for_one_more(s, org, most)
            template_id = row.id if row is not None else repo.new_id("tpl_")
            op = build_run.begin(fleet, template_id, name)
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
            build_run.failed(fleet, template_id, f"the build could not be queued: {exc}", None)
        raise
    build = build_run.run(fleet, org, row.id, ctx, start, keys, digest, blog)
    fleet.spawn(build_run.carried(fleet, op, build))
    return row, True


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
        await build_run.drop_snapshot(fleet, ready)
    log_path(fleet, row).unlink(missing_ok=True)
    build_run.packages_path(fleet, row.id).unlink(missing_ok=True)
    context_path(fleet, row.id).unlink(missing_ok=True)
    return row
