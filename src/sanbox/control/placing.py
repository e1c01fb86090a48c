"""Where a new computer runs (docs/fleet.md): on this server's own host while no fleet host has
joined; once one has, a computer booted from an image is placed on a fleet host of its org's
region (best of a few, reserved in one transaction: fleet/placement.py), and one made from a
snapshot goes to the host that holds the snapshot's files. A placement's reservation covers the
call to the host; the host's next report counts what it then runs."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from sqlalchemy import select

from ..fleet.errors import InsufficientCapacityError
from ..fleet.hosts import UP
from ..fleet.placement import Placement, Placer, Request
from ..fleet.regions import region_for
from ..host.door import GIB
from ..store.fleet_models import HostRow
from ..store.models import ComputerRow
from .fleet import Fleet


def wanted(fleet: Fleet, snapshot_host: str | None, from_snapshot: bool) -> bool:
    """Whether a create goes through placement (else: this server's own host)."""
    if from_snapshot:
        return snapshot_host is not None
    return fleet.remote is not None and fleet.remote.any_joined()


def place(
    fleet: Fleet,
    row: ComputerRow,
    disk_gib: int,
    snapshot_host: str | None,
    from_snapshot: bool,
    exclude: Collection[str] = (),
) -> Placement:
    """Reserve room for `row` on a host (none of `exclude`: hosts that refused it) and put it
    there (its host, region and generation), in one transaction; `insufficient_capacity` when no
    host of its region has room."""
    placer = Placer(fleet.db, node=fleet.node)
    region = row.region or region_for(fleet.db, row.org_id, None)  # placed before: its own
    req = Request(
        region=region or "",
        vcpus=row.vcpus,
        memory_mib=row.memory_mib,
        disk_bytes=disk_gib * GIB,
        layer=None if from_snapshot else row.image,
    )
    if from_snapshot and snapshot_host is not None:
        return placer.place_on(snapshot_host, _in_region(fleet, req, snapshot_host), row.id)
    if region is not None:
        return placer.place(req, row.id, exclude)
    last: Exception | None = None
    for name in regions_up(fleet):  # an org without a home region may run in any
        try:
            return placer.place(replace(req, region=name), row.id, exclude)
        except InsufficientCapacityError as exc:  # no room there: the next region
            last = exc
    if last is not None:
        raise last
    return placer.place(req, row.id, exclude)  # none is up: said by the placer


def release(fleet: Fleet, placement: Placement) -> None:
    Placer(fleet.db).release(placement)


def regions_up(fleet: Fleet) -> list[str]:
    """The regions with a host up, by name."""
    with fleet.db.session() as s:
        found = s.scalars(select(HostRow.region).where(HostRow.state == UP).distinct())
        return sorted(found)


def _in_region(fleet: Fleet, req: Request, host_id: str) -> Request:
    """`req` in the region of the host that holds the data (an org without a home region)."""
    if req.region:
        return req
    with fleet.db.session() as s:
        region = s.scalar(select(HostRow.region).where(HostRow.id == host_id)) or ""
    return replace(req, region=region)
