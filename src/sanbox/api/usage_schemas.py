"""The API's usage records: sums over a range by computer, template or day, and a computer's
recent metrics. The event feed (`/v1/usage/events`) is CloudEvents lines, not a model here."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from ..control.usage import Sample
from ..control.usage.intervals import Group, Totals
from ..control.usage.report import UsageReport


class UsageTotals(BaseModel):
    seconds: float = Field(description="seconds in any state but deleted")
    compute_seconds: float = Field(
        description="seconds with compute (creating, starting, running, pausing, resuming, "
        "stopping; and template builds' VMs); paused, suspended, stopped and error have none"
    )
    running_seconds: float = Field(description="seconds in state running")
    paused_seconds: float = Field(description="seconds paused or suspended (no compute)")
    vcpu_seconds: float = Field(description="vCPUs allocated x compute seconds")
    memory_gib_seconds: float = Field(description="memory allocated (GiB) x compute seconds")
    disk_gib_hours: float = Field(description="disk allocated (GiB) x hours, in every state")
    cpu_seconds: float | None = Field(
        description="CPU time the VMs actually used (their cgroups); null: unmeasured here"
    )
    egress_bytes: int | None = Field(description="bytes out through the egress proxy; null: none")
    snapshot_gib_hours: float = Field(
        description="snapshots' and template layers' own bytes (GiB) x hours they were kept"
    )
    build_seconds: float = Field(
        description="seconds template builds' VMs ran (the build VM, then its readiness VM); "
        "their vCPUs, memory and disk are in compute_seconds, vcpu_seconds, "
        "memory_gib_seconds and disk_gib_hours, not in seconds, running_seconds or states",
    )
    states: dict[str, float] = Field(description="seconds in each computer state")

    @classmethod
    def of(cls, totals: Totals) -> UsageTotals:
        return cls.model_validate(totals.rounded())


class UsageGroup(BaseModel):
    key: str = Field(description="the computer's id, the template, or the UTC day (YYYY-MM-DD)")
    name: str | None = Field(default=None, description="the computer's name (by computer)")
    template: str | None = None
    usage: UsageTotals

    @classmethod
    def of(cls, g: Group) -> UsageGroup:
        return cls(key=g.key, name=g.name, template=g.template, usage=UsageTotals.of(g.totals))


class UsageOut(BaseModel):
    org: str
    start: datetime = Field(alias="from", description="the range's start (inclusive)")
    end: datetime = Field(alias="to", description="the range's end (exclusive)")
    group_by: str
    groups: list[UsageGroup]
    total: UsageTotals
    as_of: datetime = Field(description="open intervals are counted up to this moment")

    @classmethod
    def of(cls, r: UsageReport) -> UsageOut:
        return cls.model_validate(
            {
                "org": r.org,
                "from": r.start,
                "to": r.end,
                "group_by": r.group_by,
                "groups": [UsageGroup.of(g) for g in r.groups],
                "total": UsageTotals.of(r.total),
                "as_of": r.now,
            }
        )


class MetricSample(BaseModel):
    time: float = Field(description="Unix seconds")
    cpu_percent: float | None = Field(description="of its vCPUs together since the last sample")
    memory_used: int
    memory_total: int
    disk_used: int
    disk_total: int

    @classmethod
    def of(cls, s: Sample) -> MetricSample:
        return cls(
            time=s.time,
            cpu_percent=s.cpu_percent,
            memory_used=s.memory_used,
            memory_total=s.memory_total,
            disk_used=s.disk_used,
            disk_total=s.disk_total,
        )


class MetricsOut(BaseModel):
    computer: str
    interval: float = Field(description="seconds between samples")
    samples: list[MetricSample] = Field(description="oldest first; the last hour at most")
