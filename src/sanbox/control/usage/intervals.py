"""Usage arithmetic, pure: an interval clipped to a range [from, to), split at UTC day
boundaries, and sums grouped by computer, template or day. Allocation (vCPUs, memory, disk) is
exact over any range; what was measured (CPU time, egress bytes) is known per interval only, so a
range that cuts an interval takes its share in proportion to the time inside."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from ..quotas import COMPUTE
from ..states import State

GROUPS = ("computer", "template", "day")
PAUSED = frozenset({State.PAUSED, State.SUSPENDED})
GIB_PER_MIB = 1 / 1024


@dataclass(frozen=True)
class Interval:
    """One usage interval as read from the store (`end` None: still open)."""

    computer: str
    name: str
    template: str
    state: str
    vcpus: int
    memory_mib: int
    disk_gib: int
    start: datetime
    end: datetime | None
    cpu_seconds: float | None = None
    egress_bytes: int | None = None
    kind: str = "computer"  # or snapshot (a snapshot or a template's build layer), or build
    # (a template build's VM: compute, but not a computer's life)
    size_bytes: int = 0  # a snapshot's own bytes

    def seconds(self, now: datetime) -> float:
        return max(0.0, ((self.end or now) - self.start).total_seconds())

    def clip(self, lo: datetime, hi: datetime, now: datetime) -> Interval | None:
        """The part inside [lo, hi) (an open interval runs to `now`), measurements prorated;
        None if nothing of it is inside."""
        if self.end is not None and lo <= self.start and self.end <= hi:
            return self if self.end > self.start else None  # the common case: all inside
        end = min(self.end or now, hi)
        start = max(self.start, lo)
        if end <= start:
            return None
        whole = self.seconds(now)
        share = (end - start).total_seconds() / whole if whole > 0 else 0.0
        cpu = None if self.cpu_seconds is None else self.cpu_seconds * share
        egress = None if self.egress_bytes is None else round(self.egress_bytes * share)
        return replace(self, start=start, end=end, cpu_seconds=cpu, egress_bytes=egress)

    def days(self, now: datetime) -> Iterator[Interval]:
        """The interval cut at each UTC midnight it spans."""
        end = self.end or now
        day = self.start.replace(hour=0, minute=0, second=0, microsecond=0)
        if end <= day + timedelta(days=1):  # the common case: within one day
            yield self
            return
        while day < end:
            part = self.clip(day, day + timedelta(days=1), now)
            if part is not None:
                yield part
            day += timedelta(days=1)


@dataclass
class Totals:
    """What a set of intervals used. `cpu_seconds`/`egress_bytes` stay None when none of them
    was measured (a computer the host cannot measure says so rather than 0)."""

    seconds: float = 0.0  # in any state but deleted
    compute_seconds: float = 0.0  # with a VM, being made or ended (creating ... stopping)
    running_seconds: float = 0.0  # in state running only
    paused_seconds: float = 0.0  # paused or suspended: no compute
    vcpu_seconds: float = 0.0
    memory_gib_seconds: float = 0.0
    disk_gib_seconds: float = 0.0
    cpu_seconds: float | None = None
    egress_bytes: int | None = None
    states: dict[str, float] = field(default_factory=dict)
    snapshot_gib_seconds: float = 0.0  # snapshots' and template layers' own bytes x seconds
    build_seconds: float = 0.0  # template builds' VMs running (in compute_seconds too)

    def add(self, part: Interval, now: datetime) -> None:
        s = ((part.end or now) - part.start).total_seconds()
        if part.kind == "snapshot":
            self.snapshot_gib_seconds += part.size_bytes / 2**30 * s
            return
        if part.kind == "build":  # its compute below; no computer's life or state
            self.build_seconds += s
        else:
            self.seconds += s
            self.states[part.state] = self.states.get(part.state, 0.0) + s
            if part.state == State.RUNNING:
                self.running_seconds += s
            if part.state in PAUSED:
                self.paused_seconds += s
        self.disk_gib_seconds += part.disk_gib * s
        if part.state in COMPUTE:
            self.compute_seconds += s
            self.vcpu_seconds += part.vcpus * s
            self.memory_gib_seconds += part.memory_mib * GIB_PER_MIB * s
        if part.cpu_seconds is not None:
            self.cpu_seconds = (self.cpu_seconds or 0.0) + part.cpu_seconds
        if part.egress_bytes is not None:
            self.egress_bytes = (self.egress_bytes or 0) + part.egress_bytes

    def merge(self, other: Totals) -> None:
        for name in (
            "seconds",
            "compute_seconds",
            "running_seconds",
            "paused_seconds",
            "vcpu_seconds",
            "memory_gib_seconds",
            "disk_gib_seconds",
            "snapshot_gib_seconds",
            "build_seconds",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.cpu_seconds is not None:
            self.cpu_seconds = (self.cpu_seconds or 0.0) + other.cpu_seconds
        if other.egress_bytes is not None:
            self.egress_bytes = (self.egress_bytes or 0) + other.egress_bytes
        for state, seconds in other.states.items():
            self.states[state] = self.states.get(state, 0.0) + seconds

    def rounded(self) -> dict[str, object]:
        """The totals as the API answers them: seconds to the millisecond, disk in GiB-hours."""
        return {
            "seconds": round(self.seconds, 3),
            "compute_seconds": round(self.compute_seconds, 3),
            "running_seconds": round(self.running_seconds, 3),
            "paused_seconds": round(self.paused_seconds, 3),
            "vcpu_seconds": round(self.vcpu_seconds, 3),
            "memory_gib_seconds": round(self.memory_gib_seconds, 3),
            "disk_gib_hours": round(self.disk_gib_seconds / 3600, 6),
            "cpu_seconds": None if self.cpu_seconds is None else round(self.cpu_seconds, 3),
            "egress_bytes": self.egress_bytes,
            "snapshot_gib_hours": round(self.snapshot_gib_seconds / 3600, 6),
            "build_seconds": round(self.build_seconds, 3),
            "states": {k: round(v, 3) for k, v in sorted(self.states.items())},
        }


@dataclass
class Group:
    key: str  # the computer id, the template, or the day (YYYY-MM-DD)
    name: str | None  # the computer's name (group by computer)
    template: str | None
    totals: Totals = field(default_factory=Totals)


def group(
    intervals: Iterable[Interval], lo: datetime, hi: datetime, by: str, now: datetime
) -> tuple[list[Group], Totals]:
    """Sum the parts of `intervals` inside [lo, hi) by computer, template or UTC day; groups in
    key order, and the grand total."""
    if by not in GROUPS:
        raise ValueError(f"group_by is one of {', '.join(GROUPS)}")
    groups: dict[str, Group] = {}
    total = Totals()
    for interval in intervals:
        part = interval.clip(lo, hi, now)
        if part is None:
            continue
        pieces = list(part.days(now)) if by == "day" else [part]
        for piece in pieces:
            if by == "computer":
                g = groups.setdefault(piece.computer, Group(piece.computer, piece.name, None))
                g.name, g.template = piece.name, piece.template  # the latest name it had
            elif by == "template":
                g = groups.setdefault(piece.template, Group(piece.template, None, piece.template))
            else:
                day = piece.start.date().isoformat()
                g = groups.setdefault(day, Group(day, None, None))
            g.totals.add(piece, now)
    for g in groups.values():
        total.merge(g.totals)
    return [groups[k] for k in sorted(groups)], total
