"""Usage: what each computer used, as intervals per state (`ledger`: opened and closed in the
transaction of every state write; `meter`: checked, measured and cut every few seconds), read
back summed (`report`, pure sums in `intervals`) or as CloudEvents (`cloudevents`), in worker
threads, a bounded number at once (`report_slots`).

    Usage           the door the API uses: reports, the event feed, a computer's metrics
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime

from ...store import repo
from ...store.models import Org
from ..errors import NotFoundError
from ..fleet import Fleet
from ..keys import Principal, require_host_admin
from . import cloudevents, report
from .ledger import Ledger
from .meter import Meter, Sample
from .report_slots import ReportSlots

__all__ = ["Ledger", "Meter", "Sample", "Usage"]


class Usage:
    def __init__(
        self,
        fleet: Fleet,
        meter: Meter,
        metering: bool = True,
        reports: ReportSlots | None = None,
    ) -> None:
        self.fleet, self.meter = fleet, meter
        self.reports = reports if reports is not None else ReportSlots()
        self.ledger = Ledger(meter.measure, meter.last_seen)
        self.metering = metering
        if metering:
            self.ledger.install(fleet.db)

    def _org(self, actor: Principal, name: str | None) -> Org:
        """The caller's org, or (host-admin keys only) the one it names."""
        if name is None or name == actor.org.name:
            return actor.org
        require_host_admin(actor, f"reading the usage of org {name!r}")
        with self.fleet.db.session() as s:
            org = repo.org_by_name(s, name)
        if org is None:
            raise NotFoundError(f"no org named {name!r}", "org_not_found")
        return org

    async def report(
        self,
        actor: Principal,
        org: str | None,
        start: datetime | None,
        end: datetime | None,
        group_by: str,
    ) -> report.UsageReport:
        """The org's usage, read in a worker thread in one of the caller's org's places."""
        read = functools.partial(
            report.usage, self.fleet.db, self._org(actor, org), start, end, group_by
        )
        return await self.reports.run(actor.org.id, read)

    async def events(
        self, actor: Principal, org: str | None, after: int, limit: int
    ) -> list[cloudevents.Closed]:
        """Closed intervals after the cursor: the caller's org's, a named org's (host admin), or
        every org's (a host-admin key naming none); read as a report is."""
        orgs: Sequence[Org] | None = [self._org(actor, org)]
        if org is None and actor.host_admin:
            orgs = None
        read = functools.partial(report.events, self.fleet.db, orgs, after, limit)
        return await self.reports.run(actor.org.id, read)

    def metrics(self, org: Org, ref: str) -> tuple[str, list[Sample]]:
        row = self.fleet.get(org, ref)
        return row.id, self.meter.samples(row.id)
