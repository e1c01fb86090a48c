"""Reading usage: an org's intervals over a range, summed by computer, template or day; closed
intervals after a cursor, as CloudEvents. Any key reads its own org's; a host-admin key any
org's (by name) or, for the event feed, every org's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, not_, or_, select

from ...store import Database
from ...store.models import ComputerRow, Org, UsageRow
from ..errors import InvalidRequestError
from . import cloudevents, intervals, ledger
from .intervals import Interval

MAX_RANGE = timedelta(days=400)
MAX_EVENTS = 10_000  # a page of the event feed


@dataclass(frozen=True)
class UsageReport:
    org: str
    start: datetime
    end: datetime
    group_by: str
    groups: list[intervals.Group]
    total: intervals.Totals
    now: datetime


_COLUMNS = (
    UsageRow.computer_id,
    UsageRow.name,
    UsageRow.template,
    UsageRow.state,
    UsageRow.vcpus,
    UsageRow.memory_mib,
    UsageRow.disk_gib,
    UsageRow.started_at,
    UsageRow.ended_at,
    UsageRow.cpu_seconds,
    UsageRow.egress_bytes,
    UsageRow.kind,
    UsageRow.size_bytes,
)


def _aware(when: datetime | None) -> datetime | None:
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when


def range_of(
    start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """[start, end): by default the current UTC month so far."""
    end = _aware(end) or now
    start = _aware(start) or now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if end <= start:
        raise InvalidRequestError("`from` must be before `to`")
    if end - start > MAX_RANGE:
        raise InvalidRequestError(f"a usage range is at most {MAX_RANGE.days} days")
    return start, end


def usage(
    db: Database, org: Org, start: datetime | None, end: datetime | None, group_by: str
) -> UsageReport:
    """The org's usage in [start, end). Intervals wholly inside the range (and, by day, inside
    one UTC day) are summed by the database, per computer, state and allocation; the few that
    the range or a midnight cuts, and open ones, are read one by one and clipped."""
    if group_by not in intervals.GROUPS:
        raise InvalidRequestError(f"group_by is one of: {', '.join(intervals.GROUPS)}")
    with db.session() as s:
        now = ledger.db_now(s)
        lo, hi = range_of(start, end, now)
        pg = s.get_bind().dialect.name == "postgresql"
        inside = and_(
            UsageRow.org_id == org.id,
            UsageRow.ended_at.is_not(None),
            UsageRow.started_at >= lo,
            UsageRow.ended_at <= hi,
        )
        keys: list[Any] = [
            UsageRow.computer_id,
            UsageRow.template,
            UsageRow.state,
            UsageRow.vcpus,
            UsageRow.memory_mib,
            UsageRow.disk_gib,
            UsageRow.kind,
            UsageRow.size_bytes,
        ]
        if group_by == "day":
            inside = and_(inside, _day(UsageRow.started_at, pg) == _day(UsageRow.ended_at, pg))
            keys.append(_day(UsageRow.started_at, pg))
        sums = select(
            *keys,
            func.max(UsageRow.name),
            func.sum(_seconds(pg)),
            func.sum(UsageRow.cpu_seconds),
            func.sum(UsageRow.egress_bytes),
        ).where(inside)
        summed = s.execute(sums.group_by(*keys)).all()
        cut = select(*_COLUMNS).where(
            UsageRow.org_id == org.id,
            UsageRow.started_at < hi,
            or_(UsageRow.ended_at.is_(None), UsageRow.ended_at > lo),
            not_(inside),
        )
        rows = s.execute(cut.order_by(UsageRow.started_at, UsageRow.id)).all()
        live = select(ComputerRow.id, ComputerRow.name).where(ComputerRow.org_id == org.id)
        names = dict(s.execute(live).all())  # a computer's name now; a deleted one's, its last
    found: list[Interval] = []
    for r in summed:
        begin = lo
        if group_by == "day":
            begin = max(lo, datetime.fromisoformat(str(r[8])).replace(tzinfo=UTC))
        seconds = float(r[-3] or 0.0)
        found.append(
            Interval(
                r[0],
                names.get(r[0], str(r[-4])),
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                begin,
                begin + timedelta(seconds=seconds),
                r[-2],
                None if r[-1] is None else int(r[-1]),
                kind=r[6],
                size_bytes=int(r[7] or 0),
            )
        )
    found += (
        Interval(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            _aware(r[7]) or now,
            _aware(r[8]),
            r[9],
            r[10],
            kind=r[11],
            size_bytes=int(r[12] or 0),
        )
        for r in rows
    )
    groups, total = intervals.group(found, lo, hi, group_by, now)
    for g in groups:  # the name it has now (the pieces summed above carry it too)
        if group_by == "computer":
            g.name = names.get(g.key, g.name)
    return UsageReport(org.name, lo, hi, group_by, groups, total, now)


def _seconds(pg: bool) -> Any:
    if pg:
        return func.extract("epoch", UsageRow.ended_at - UsageRow.started_at)
    return (func.julianday(UsageRow.ended_at) - func.julianday(UsageRow.started_at)) * 86400.0


def _day(column: Any, pg: bool) -> Any:
    """The UTC date of a timestamp, as YYYY-MM-DD."""
    if pg:
        return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")
    return func.date(column)


def events(
    db: Database, orgs: Sequence[Org] | None, after: int, limit: int
) -> list[cloudevents.Closed]:
    """Closed intervals with a sequence number past `after`, in order (of `orgs`; None: all)."""
    limit = max(1, min(limit, MAX_EVENTS))
    with db.session() as s:
        q = select(UsageRow).where(and_(UsageRow.seq.is_not(None), UsageRow.seq > after))
        if orgs is not None:
            q = q.where(UsageRow.org_id.in_([o.id for o in orgs]))
        rows = s.scalars(q.order_by(UsageRow.seq).limit(limit)).all()
        names = {o.id: o.name for o in s.scalars(select(Org)).all()} if rows else {}
    return [
        cloudevents.Closed(
            int(r.seq or 0),
            r.ordinal,
            names.get(r.org_id, r.org_id),
            Interval(
                r.computer_id,
                r.name,
                r.template,
                r.state,
                r.vcpus,
                r.memory_mib,
                r.disk_gib,
                r.started_at,
                r.ended_at,
                r.cpu_seconds,
                r.egress_bytes,
                kind=r.kind,
                size_bytes=r.size_bytes,
            ),
        )
        for r in rows
    ]
