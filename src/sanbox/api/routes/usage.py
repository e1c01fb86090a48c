"""/v1/usage: what an org used over a range (JSON or CSV), the CloudEvents feed by cursor, and a
computer's recent metrics. Any key reads its own org's; a host-admin key any org's (`org`).
Reports and the feed are read in worker threads, a few at once per org and in all
(`control/usage/report_slots.py`: 429 `too_many_usage_reports` past them)."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ...control.usage import cloudevents
from ...control.usage.report import UsageReport
from ..schemas import ErrorBody, Name
from ..usage_schemas import MetricSample, MetricsOut, UsageOut, UsageTotals
from ._deps import Auth, Plane

router = APIRouter(
    prefix="/v1",
    tags=["usage"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404, 422, 429)},
)


@router.get(
    "/usage",
    response_model=UsageOut,
    responses={200: {"content": {"text/csv": {}}}},
)
async def usage(
    auth: Auth,
    plane: Plane,
    start: Annotated[
        datetime | None, Query(alias="from", description="default: the month's start")
    ] = None,
    end: Annotated[datetime | None, Query(alias="to", description="default: now")] = None,
    group_by: Literal["computer", "template", "day"] = "computer",
    org: Annotated[Name | None, Query(description="another org (host-admin keys)")] = None,
    format: Literal["json", "csv"] = "json",  # noqa: A002
) -> UsageOut | Response:
    """Usage in [from, to): allocation exactly, measured CPU and egress prorated where the range
    cuts an interval; a computer still running counts up to now (`as_of`)."""
    found = await plane.usage.report(auth, org, start, end, group_by)
    if format == "csv":
        return Response(as_csv(found), media_type="text/csv; charset=utf-8")
    return UsageOut.of(found)


def as_csv(found: UsageReport) -> str:
    """One row per group, then `total`; the columns of UsageTotals but `states`."""
    out = io.StringIO()
    fields = ["key", "name", "template", *(f for f in UsageTotals.model_fields if f != "states")]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    rows = [(g.key, g.name, g.template, g.totals) for g in found.groups]
    rows.append(("total", None, None, found.total))
    for key, name, template, totals in rows:
        values = {k: v for k, v in totals.rounded().items() if k != "states"}
        writer.writerow(
            {
                "key": key,
                "name": name or "",
                "template": template or "",
                **{k: "" if v is None else v for k, v in values.items()},
            }
        )
    return out.getvalue()


@router.get(
    "/usage/events",
    responses={
        200: {"content": {cloudevents.CONTENT_TYPE: {}}, "description": "CloudEvents lines"}
    },
)
async def usage_events(
    request: Request,
    auth: Auth,
    plane: Plane,
    after: Annotated[int, Query(ge=0, description="the `sequence` of the last event read")] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    org: Annotated[Name | None, Query(description="another org (host-admin keys)")] = None,
) -> Response:
    """Closed usage intervals after the cursor, one CloudEvents 1.0 JSON object a line, in order
    of `sequence`; ids are deterministic. A host-admin key without `org` reads every org's."""
    found = await plane.usage.events(auth, org, after, limit)
    source = (
        request.app.state.settings.usage_source
    )  # never the request's Host: ids dedupe per source
    headers = {"Sanbox-Cursor": str(found[-1].seq if found else after)}
    return Response(
        cloudevents.lines(found, source), media_type=cloudevents.CONTENT_TYPE, headers=headers
    )


@router.get("/computers/{ref}/metrics", response_model=MetricsOut, tags=["computers"])
async def computer_metrics(ref: str, auth: Auth, plane: Plane) -> MetricsOut:
    """What the guest reported of itself every few seconds while running (the last hour)."""
    computer_id, samples = plane.usage.metrics(auth.org, ref)
    return MetricsOut(
        computer=computer_id,
        interval=plane.usage.meter.sample_interval,
        samples=[MetricSample.of(s) for s in samples],
    )
