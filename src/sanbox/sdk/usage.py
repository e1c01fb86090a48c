"""Usage: `client.usage.get(...)` (sums over a range by computer, template or day), `.csv(...)`,
`.events(after=...)` (CloudEvents, read on from a cursor) and `computer.metrics()`."""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .records import _known

if TYPE_CHECKING:
    from .client import AsyncSanbox


@dataclass(frozen=True)
class UsageTotals:
    """What was used: seconds (in all, with compute, running, paused), vCPU- and
    memory-GiB-seconds of compute (template builds' VMs' too: `build_seconds`), disk GiB-hours
    in every state, CPU time measured (None: unmeasured on that host) and egress bytes (None: not
    counted)."""

    seconds: float = 0.0
    compute_seconds: float = 0.0
    running_seconds: float = 0.0
    paused_seconds: float = 0.0
    vcpu_seconds: float = 0.0
    memory_gib_seconds: float = 0.0
    disk_gib_hours: float = 0.0
    cpu_seconds: float | None = None
    egress_bytes: int | None = None
    snapshot_gib_hours: float = 0.0
    build_seconds: float = 0.0  # template builds' VMs (their compute in the sums above)
    states: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UsageTotals:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class UsageGroup:
    key: str  # the computer's id, the template, or the UTC day
    usage: UsageTotals
    name: str | None = None
    template: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UsageGroup:
        known = _known(cls, data)
        known["usage"] = UsageTotals.from_json(data.get("usage") or {})
        return cls(**known)


@dataclass(frozen=True)
class UsageReport:
    """The API's `UsageOut`; `start`/`end` are its `from`/`to`."""

    org: str
    group_by: str
    groups: list[UsageGroup]
    total: UsageTotals
    start: str | None = None
    end: str | None = None
    as_of: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UsageReport:
        return cls(
            org=data["org"],
            group_by=data["group_by"],
            groups=[UsageGroup.from_json(g) for g in data.get("groups", [])],
            total=UsageTotals.from_json(data.get("total") or {}),
            start=data.get("from"),
            end=data.get("to"),
            as_of=data.get("as_of"),
        )


@dataclass(frozen=True)
class MetricSample:
    time: float
    memory_used: int
    memory_total: int
    disk_used: int
    disk_total: int
    cpu_percent: float | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricSample:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Metrics:
    computer: str
    interval: float
    samples: list[MetricSample] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Metrics:
        samples = [MetricSample.from_json(s) for s in data.get("samples", [])]
        return cls(computer=data["computer"], interval=float(data["interval"]), samples=samples)


def _range(
    start: datetime | str | None, end: datetime | str | None, by: str, org: str | None
) -> dict[str, Any]:
    def text(when: datetime | str | None) -> str | None:
        return when.isoformat() if isinstance(when, datetime) else when

    return {"from": text(start), "to": text(end), "group_by": by, "org": org}


class AsyncUsage:
    """Usage of the caller's org (a host-admin key: any org's, by `org`)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def get(
        self,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        by: str = "computer",
        org: str | None = None,
    ) -> UsageReport:
        """Usage in [start, end) (default: this month so far), grouped `by` computer, template
        or day (UTC)."""
        params = _range(start, end, by, org)
        return UsageReport.from_json(
            await self._client.http.json("GET", "/v1/usage", params=params)
        )

    async def csv(
        self,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        by: str = "computer",
        org: str | None = None,
    ) -> str:
        """The same as CSV: a row per group, then `total`."""
        params = {**_range(start, end, by, org), "format": "csv"}
        return (await self._client.http.request("GET", "/v1/usage", params=params)).text

    async def events(
        self, after: int = 0, limit: int = 1000, org: str | None = None
    ) -> tuple[builtins.list[dict[str, Any]], int]:
        """Closed usage intervals after the cursor as CloudEvents (dicts), and the cursor to
        pass next time (the last event's `sequence`, or `after` when there was none)."""
        params = {"after": after, "limit": limit, "org": org}
        response = await self._client.http.request("GET", "/v1/usage/events", params=params)
        found = [json.loads(line) for line in response.text.splitlines() if line.strip()]
        return found, int(response.headers.get("sanbox-cursor", after))
