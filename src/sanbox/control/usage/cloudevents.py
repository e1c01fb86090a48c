"""A closed usage interval as a CloudEvents 1.0 event (structured JSON mode, one per line), pure.

Three types: a computer's interval (`sanbox.computer.usage`), a snapshot's or template layer's
bytes held (`sanbox.snapshot.usage`) and a template build's VM (`sanbox.build.usage`: the data of
a computer's, its id under `build`; a meter of compute sums both).

The id is deterministic (`<computer>:<ordinal>:<start>`), so a consumer that reads an event twice
(after a crash on either side) deduplicates it; `sequence` (the CloudEvents sequence extension) is
the cursor: read on with `after=<sequence>`. OpenMeter ingests these as they are."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .intervals import Interval, Totals

TYPE = "sanbox.computer.usage"
SNAPSHOT_TYPE = "sanbox.snapshot.usage"  # a snapshot's or template layer's own bytes held
BUILD_TYPE = "sanbox.build.usage"  # a template build's VM: a computer's compute, its id `build`
_TYPES = {"computer": TYPE, "snapshot": SNAPSHOT_TYPE, "build": BUILD_TYPE}
CONTENT_TYPE = "application/x-ndjson"  # lines, each application/cloudevents+json


@dataclass(frozen=True)
class Closed:
    """A closed interval with what names it for a consumer."""

    seq: int
    ordinal: int
    org: str  # the org's name: the subject billed
    interval: Interval


def stamp(when: datetime) -> str:
    """RFC 3339 in UTC, to the microsecond: `2026-12-01T10:00:00.123456Z`."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(closed: Closed, source: str) -> dict[str, Any]:
    iv = closed.interval
    assert iv.end is not None, "only closed intervals are events"
    totals = Totals()
    totals.add(iv, iv.end)
    data = {
        "computer": iv.computer,
        "name": iv.name,
        "template": iv.template,
        "state": iv.state,
        "start": stamp(iv.start),
        "end": stamp(iv.end),
        "duration_seconds": round(iv.seconds(iv.end), 6),
        "vcpus": iv.vcpus,
        "memory_mib": iv.memory_mib,
        "disk_gib": iv.disk_gib,
        "vcpu_seconds": round(totals.vcpu_seconds, 6),
        "memory_gib_seconds": round(totals.memory_gib_seconds, 6),
        "disk_gib_seconds": round(totals.disk_gib_seconds, 6),
        "cpu_used_seconds": None if iv.cpu_seconds is None else round(iv.cpu_seconds, 6),
        "egress_bytes": iv.egress_bytes,
    }
    if iv.kind == "snapshot":  # `computer` is the snapshot's id; nothing but bytes held
        data = {
            "snapshot": iv.computer,
            "name": iv.name,
            "template": iv.template,
            "state": iv.state,
            "start": data["start"],
            "end": data["end"],
            "duration_seconds": data["duration_seconds"],
            "size_bytes": iv.size_bytes,
            "snapshot_gib_seconds": round(totals.snapshot_gib_seconds, 6),
        }
    if iv.kind == "build":  # `computer` is the build VM's id (`bld-…`); `name` its template
        data = {"build": data.pop("computer"), **data}
    return {
        "specversion": "1.0",
        "type": _TYPES[iv.kind],
        "id": f"{iv.computer}:{closed.ordinal}:{stamp(iv.start)}",
        "source": source,
        "subject": closed.org,
        "time": stamp(iv.end),
        "sequence": str(closed.seq),
        "datacontenttype": "application/json",
        "data": data,
    }


def lines(events: list[Closed], source: str) -> str:
    return "".join(json.dumps(event(c, source), separators=(",", ":")) + "\n" for c in events)
