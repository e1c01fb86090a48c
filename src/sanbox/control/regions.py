"""A computer's region (docs/fleet.md): asked for at its create (one its org may use; left out,
its org's home region, or wherever its data is), set when it is placed and never changed. Work
that starts from data a host holds (a create from a snapshot or from a template's ready snapshot,
a fork) runs in that host's region: asking for another is `region_mismatch`, refused before
anything is written. An org's home and other regions are a host admin's to set (`keys.py`)."""

from __future__ import annotations

from sqlalchemy import select

from ..fleet.errors import InsufficientCapacityError, RegionMismatchError
from ..fleet.regions import check_name, region_for
from ..store.fleet_models import HostRow
from ..store.models import Org
from .fleet import Fleet


def check(fleet: Fleet, org: Org, requested: str | None) -> None:
    """A region asked for: well formed, and one the org may use (`region_not_allowed`)."""
    if requested is None:
        return
    check_name(requested)
    region_for(fleet.db, org.id, requested)


def of_host(fleet: Fleet, host_id: str | None) -> str | None:
    """The region of the host that holds some data (None: this server's own, which has none)."""
    if host_id is None:
        return None
    with fleet.db.session() as s:
        return s.scalar(select(HostRow.region).where(HostRow.id == host_id))


def of_create(
    fleet: Fleet, requested: str | None, data_host: str | None, from_data: bool, placed: bool
) -> str | None:
    """The region a create's record gets before it is placed: the one asked for (None: its
    placement decides). Data on a host of another region, or no fleet host to run it in the
    region asked for, is refused here, before the record."""
    if requested is None:
        return None
    if from_data:
        held = of_host(fleet, data_host)
        if held != requested:
            where = f"a host of region {held}" if held else "this server's own host (no region)"
            raise RegionMismatchError(
                f"what it starts from is on {where}, not in region {requested}: leave the "
                "region out, or start from a snapshot of that region"
            )
        return requested
    if not placed:
        raise InsufficientCapacityError(
            f"no host in region {requested}: no fleet host has joined this server "
            "(`sanbox host join`), or leave the region out"
        )
    return requested


def check_fork(source_region: str | None, requested: str | None) -> None:
    """A fork runs where its source's memory and disk are: another region is refused."""
    if requested is not None and requested != source_region:
        where = f"region {source_region}" if source_region else "this server's own host"
        raise RegionMismatchError(
            f"a fork runs where its source is ({where}), not in region {requested}: leave the "
            "region out"
        )
