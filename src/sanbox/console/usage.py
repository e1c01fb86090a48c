"""The org's use over time, from its usage records (`GET /v1/usage`'s report): compute, running
and paused hours and vCPU-hours by day over the last weeks, drawn as bars by the server, and the
same range by computer as a table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Response

from .access import Plane, Reader
from .charts import bars
from .render import ConsoleRoute, page

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

DAYS = 14


@router.get("/usage")
async def usage_page(v: Reader, plane: Plane, days: int = DAYS) -> Response:
    days = min(max(days, 1), 90)
    now = datetime.now(UTC)
    start = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    by_day = await plane.usage.report(v.principal, None, start, now, "day")  # in threads
    by_computer = await plane.usage.report(v.principal, None, start, now, "computer")
    spent = {g.key: g.totals for g in by_day.groups}
    keys = [(start + timedelta(days=i)).strftime("%Y-%m-%d") for i in range(days)]
    charts = [
        bars(
            [(k[5:], spent[k].vcpu_seconds / 3600 if k in spent else 0.0) for k in keys],
            "vCPU-hours by day",
            "vCPU-h",
        ),
        bars(
            [(k[5:], spent[k].running_seconds / 3600 if k in spent else 0.0) for k in keys],
            "Running hours by day",
            "h",
        ),
    ]
    return page(
        "usage.html",
        v,
        days=days,
        start=start,
        charts=charts,
        total=by_computer.total,
        computers=by_computer.groups,
    )
