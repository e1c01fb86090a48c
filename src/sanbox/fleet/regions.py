"""An org's regions: its home region (where a create without one goes) and the others it may
use. A computer's region is set at its create and never changes (placement.py keeps to it)."""

from __future__ import annotations

import re

from sqlalchemy import select

from ..control.errors import InvalidRequestError
from ..store import Database
from ..store.models import Org
from .errors import RegionNotAllowedError

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")  # as hosts name theirs (hosts.py)
MAX_REGIONS = 16  # regions an org may use besides its home


def check_name(region: str) -> None:
    if not _NAME.fullmatch(region):
        raise InvalidRequestError(
            f"a region is 1-32 of a-z, 0-9 and '-', starting with a letter or digit: "
            f"{region[:40]!r}",
            "invalid_region",
        )


def region_for(db: Database, org_id: str, requested: str | None) -> str | None:
    """The region a create of the org goes to: `requested` if the org may use it, else its home.
    None: the org has no home region (one host, no regions: anywhere)."""
    with db.session() as s:
        row = s.execute(select(Org.home_region, Org.regions).where(Org.id == org_id)).one()
    home: str | None = row.home_region
    others: list[str] = row.regions or []
    if requested is None or requested == home:
        return home
    if requested in others or home is None:
        return requested
    raise RegionNotAllowedError(
        f"this org may use regions {', '.join([home, *others])}, not {requested}"
    )


def set_regions(db: Database, org_id: str, home: str | None, others: list[str]) -> None:
    """A host admin's setting: the org's home region and the others it may use."""
    with db.session() as s:
        org = s.get_one(Org, org_id)
        org.home_region, org.regions = home, sorted(set(others) - {home}) or None
