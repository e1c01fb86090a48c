"""Where a template builds (docs/fleet.md, "Templates per region"). A template is built in one
region, and its build computers, cached steps and ready snapshot exist only on a host of it; the
same template in another region is another build there.

- The region: the one asked for (one the org may use, with a host up in it); else, once fleet
  hosts have joined, the org's home region (an org without one: the first region with a host
  up); else "" (the server's own host: one host, no fleet).
- The host, in a region: the one that holds what the build starts from (its base template's
  built disk, or the last step the region has cached), else the best of a few hosts of the
  region with room for a build computer that hold the base image's build (placement). Its
  reservation is held for the build.

The VMs a build runs on fleet hosts are recorded while they run: `build_vms.py`.
"""

from __future__ import annotations

import contextlib

from sqlalchemy import select

from ..fleet.errors import InsufficientCapacityError
from ..fleet.placement import Placement, Placer, Request
from ..fleet.regions import region_for
from ..host.door import GIB
from ..store import repo
from ..store.models import Org, SnapshotRow
from . import placing, regions
from .errors import ControlError
from .fleet import Fleet


def region_of(fleet: Fleet, org: Org, requested: str | None) -> str:
    """The region a build of the org runs in ("" : the server's own host); refused before
    anything is written when the org may not use it or no host of it is up. "" asks for the
    server's own host (a rebuild of a template built there)."""
    if requested == "":
        return ""
    if requested is not None:
        regions.check(fleet, org, requested)
        if requested not in placing.regions_up(fleet):
            raise InsufficientCapacityError(
                f"no host of region {requested} is up to build on: see `sanbox host ls`"
            )
        return requested
    if not placing.wanted(fleet, None, False):  # no fleet host has joined
        return ""
    home = region_for(fleet.db, org.id, None)
    if home is not None:
        return home
    up = placing.regions_up(fleet)
    return up[0] if up else ""


def place(
    fleet: Fleet,
    region: str,
    base_snapshot: str | None,
    image_build: str,
    keys: list[str],
    org: Org,
    memory_mib: int,
    disk_gib: int,
) -> Placement:
    """Reserve a build computer's room on the host of `region` that should build it."""
    req = Request(
        region=region,
        vcpus=2,
        memory_mib=memory_mib,
        disk_bytes=disk_gib * GIB,
        layer=None if base_snapshot else image_build,
    )
    placer = Placer(fleet.db, node=fleet.node)
    holder = _holder(fleet, org, base_snapshot, keys)
    if base_snapshot is not None:  # its base's disk is there: that host or none
        if holder is None:
            raise InsufficientCapacityError(f"the base template's disk is on no host of {region}")
        return placer.place_on(holder, req)
    if holder is not None:
        with contextlib.suppress(ControlError):  # down or full: built from the start elsewhere
            return placer.place_on(holder, req)  # its cached steps are there
    return placer.place(req)


def _holder(fleet: Fleet, org: Org, base_snapshot: str | None, keys: list[str]) -> str | None:
    """The host that holds the base's disk, or the deepest cached step of these keys."""
    with fleet.db.session() as s:
        if base_snapshot is not None:
            return s.scalar(select(SnapshotRow.host_id).where(SnapshotRow.id == base_snapshot))
        cached = {row.key: row.snapshot_id for row in repo.build_steps(s, org.id, keys)}
        for key in reversed(keys):
            if key in cached:
                snap = s.get(SnapshotRow, cached[key])
                if snap is not None and snap.state == "layer" and snap.host_id is not None:
                    return snap.host_id
    return None


def cached_on(fleet: Fleet, org: Org, keys: list[str], host_id: str | None) -> dict[str, str]:
    """The keys already built for this org whose layers are on `host_id` (None: this server's
    own host)."""
    found = {}
    with fleet.db.session() as s:
        for row in repo.build_steps(s, org.id, keys):
            snap = s.get(SnapshotRow, row.snapshot_id)
            if snap is not None and snap.state == "layer" and snap.host_id == host_id:
                found[row.key] = row.snapshot_id
    return found
