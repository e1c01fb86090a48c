"""Which build of an org's template a request means. A template is built per region (one row
per region it is built in, "" for this server's own host): a request names a region, or gets
the build in the org's home region, or the only one."""

from __future__ import annotations

from dataclasses import dataclass

from ..fleet.regions import region_for
from ..host.door import RECIPES, Image
from ..store import repo
from ..store.models import Org, SnapshotRow, TemplateRow
from .errors import ConflictError, NotFoundError
from .fleet import Fleet


@dataclass(frozen=True)
class Resolved:
    """What a computer of a template starts from."""

    template: TemplateRow
    image: Image
    snapshot: SnapshotRow  # the ready snapshot, or the built disk (booted)
    booted_because: str | None  # None: restored from the ready snapshot


def get(fleet: Fleet, org: Org, ref: str, region: str | None = None) -> TemplateRow:
    """The org's template `ref` (an id, or a name) in `region`; no region: the only build of that
    name, or the one in the org's home region."""
    with fleet.db.session() as s:
        rows = repo.templates_named(s, org.id, ref, None)
    if region is not None:
        found = [row for row in rows if row.region == region]
        if found:
            return found[0]
        if rows:
            raise _not_in_region(rows, region)
    if len(rows) == 1:
        return rows[0]
    if not rows:
        known = ", ".join(sorted(RECIPES))
        raise NotFoundError(
            f"no template {ref!r} in this org: built in are {known}; build one with "
            "`sanbox template build`",
            "template_not_found",
        )
    home = region_for(fleet.db, org.id, None) or ""
    for row in rows:
        if row.region == home:
            return row
    raise ConflictError(
        f"template {ref} is built in regions {_where(rows)}: say which (--region)",
        "region_required",
    )


def built_as(fleet: Fleet, org_id: str, name: str, region: str | None) -> TemplateRow | None:
    """The org's template `name` as built in `region` (None: this server's own host), else any
    build of it: what a computer of it keeps of its spec (its readiness check, its ports, its
    secrets) whichever way it was made. None for a built-in, or a template deleted since."""
    if name in RECIPES:
        return None
    with fleet.db.session() as s:
        rows = repo.templates_named(s, org_id, name, None)
    return next((r for r in rows if r.region == (region or "")), rows[0] if rows else None)


def for_create(fleet: Fleet, org: Org, name: str, requested: str | None) -> TemplateRow:
    """The build of the org's template `name` a create uses: the one in the region asked for,
    else in the org's home region, else the only one. A template built on this server's own host
    before fleet hosts joined serves a create that asks for no region, as it always did."""
    with fleet.db.session() as s:
        rows = repo.templates_named(s, org.id, name, None)
    wanted = requested or region_for(fleet.db, org.id, None)
    if rows and wanted is not None:
        found = [row for row in rows if row.region == wanted]
        if not found and requested is None:
            found = [row for row in rows if row.region == ""]
        if not found:
            raise _not_in_region(rows, wanted)
        return found[0]
    return get(fleet, org, name)


def _where(rows: list[TemplateRow]) -> str:
    return ", ".join(row.region or "(this server's own host)" for row in rows)


def _not_in_region(rows: list[TemplateRow], region: str) -> ConflictError:
    name = rows[0].name
    return ConflictError(
        f"template {name} is not built in region {region} (it is in {_where(rows)}): build it "
        f"there with `sanbox template rebuild {name} --region {region}`",
        "template_not_in_region",
    )


def resolve(
    fleet: Fleet,
    org: Org,
    name: str,
    vcpus: int | None,
    memory_mib: int | None,
    region: str | None = None,
) -> Resolved:
    """What a new computer of the org's template `name` (in `region`: `for_create`) starts from:
    its ready snapshot, unless it asks for other vCPUs or memory than that has (then its built
    disk, booted, and why)."""
    row = for_create(fleet, org, name, region)
    if row.snapshot_id is None or row.image is None:
        why = f"its build failed: {row.error}" if row.state == "failed" else "it is being built"
        raise ConflictError(f"template {row.name} has no build yet: {why}", "template_building")
    image = fleet.image_for(row.name, row.image)
    reason = None
    if row.ready_snapshot_id is None:
        reason = row.ready_reason or "the template has no ready snapshot"
    elif vcpus not in (None, row.vcpus) or memory_mib not in (None, row.memory_mib):
        asked = f"{vcpus or row.vcpus} vCPU(s) and {memory_mib or row.memory_mib} MiB"
        reason = f"asked for {asked}; its ready snapshot has {row.vcpus} and {row.memory_mib}"
    snapshot_id = row.snapshot_id if reason else row.ready_snapshot_id
    with fleet.db.session() as s:
        snap = s.get(SnapshotRow, snapshot_id)
    if snap is None:
        raise ConflictError(
            f"template {row.name} lost its build: build it again", "template_building"
        )
    return Resolved(row, image, snap, reason)
