"""The usage ledger: every computer has one open interval (its state and allocation since a
moment), closed and followed by the next whenever its record's state, vCPUs, memory or disk
change. That happens in one place, a `before_flush` hook on the store's sessions: whichever verb
writes a computer (a transition, a create, a claim, a delete), its interval is closed and the
next opened in the same transaction as the write, at the database's clock. Nothing is lost or
counted twice by a crash: the state write and the interval change commit or vanish together.

A template build's VM (a `build_vms` record, written before the VM is made and removed once it
is destroyed) has one interval of kind `build` from its record's write to its removal: compute
(vCPUs, memory, disk) like a running computer's, named by its template.

When a crash (`kill -9` of the server, a host reboot) left an interval open whose VM is gone, the
reconciler records the transition under `ending_at(proven)`: the interval closes at the last
moment it was seen to hold (`checked_at`, refreshed by the meter every few seconds), not at the
restart. An interval whose VM outlived the server simply goes on, its counters read on from the
marks stored in it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import inspect, select, text
from sqlalchemy.orm import Session

from ...store.fleet_models import BuildVmRow
from ...store.models import ComputerRow, SnapshotRow, UsageRow, UsageSequenceRow
from ..quotas import COMPUTE

_TRACKED = ("state", "vcpus", "memory_mib", "disk_gib", "name")  # name: a pool claim
_ENDING_AT: ContextVar[datetime | None] = ContextVar("sanbox_usage_ending_at", default=None)
_SQLITE_NOW = text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
_PG_NOW = text("SELECT now()")


@dataclass(frozen=True)
class Reading:
    """A VM's counters now: CPU time (µs) and egress bytes; None where unmeasured."""

    cpu_usec: int | None = None
    egress_bytes: int | None = None


Measure = Callable[[str], Reading]  # computer id -> its counters now
# computer id, host id, its open interval, now -> where it closes if its VM was not seen
LastSeen = Callable[[str, str | None, UsageRow, datetime], datetime | None]


def db_now(s: Session) -> datetime:
    """The database's clock (PostgreSQL: the transaction's time; SQLite: the host's, to the ms)."""
    if s.get_bind().dialect.name == "sqlite":
        value = s.execute(_SQLITE_NOW).scalar_one()
        return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)
    found = s.execute(_PG_NOW).scalar_one()
    assert isinstance(found, datetime)
    return found.astimezone(UTC)


@contextlib.contextmanager
def ending_at(proven: datetime | None) -> Iterator[None]:
    """Intervals closed inside close at `proven` (the last moment known to hold) if it is
    earlier than now: what the reconciler uses for a VM that died while no server watched."""
    token = _ENDING_AT.set(proven)
    try:
        yield
    finally:
        _ENDING_AT.reset(token)


def read_into(row: UsageRow, reading: Reading) -> None:
    """Add what the counters grew by since the interval's marks. A counter below its mark was
    reset (a new VM process, a restarted proxy): all of it is new."""
    if reading.cpu_usec is not None:
        mark = row.cpu_mark_usec
        if mark is None and row.state in _BOOTING:  # a new VM: its counter began at 0
            mark = 0
        if mark is not None:
            grown = reading.cpu_usec - mark if reading.cpu_usec >= mark else reading.cpu_usec
            row.cpu_seconds = (row.cpu_seconds or 0.0) + grown / 1e6
        row.cpu_mark_usec = reading.cpu_usec
    if reading.egress_bytes is not None:
        mark = row.egress_mark or 0
        grown = (
            reading.egress_bytes - mark if reading.egress_bytes >= mark else reading.egress_bytes
        )
        row.egress_bytes = (row.egress_bytes or 0) + grown
        row.egress_mark = reading.egress_bytes


_BOOTING = frozenset({"creating", "starting", "resuming"})
BUILD_STATE = "running"  # a build VM's interval's state: it has compute, metered as a computer's


class Ledger:
    """Opens and closes intervals; `install` puts its hook on a database's sessions."""

    def __init__(self, measure: Measure | None = None, last_seen: LastSeen | None = None) -> None:
        self.measure: Measure = measure or (lambda _c: Reading())
        self.last_seen: LastSeen = last_seen or (lambda _c, _h, _i, _n: None)

    def install(self, db: Any) -> None:
        db.on_flush(self._before_flush)

    # the hook --------------------------------------------------------------------------------

    def _before_flush(self, s: Session, _ctx: Any, _instances: Any) -> None:
        changed: list[tuple[ComputerRow, bool]] = []
        for obj in s.new:
            if isinstance(obj, ComputerRow):
                changed.append((obj, False))
        for obj in s.dirty:
            if isinstance(obj, ComputerRow) and _alloc_changed(obj):
                changed.append((obj, False))
        for obj in s.deleted:
            if isinstance(obj, ComputerRow):
                changed.append((obj, True))
        snaps = [(o, False) for o in s.new if isinstance(o, SnapshotRow)]
        snaps += [(o, False) for o in s.dirty if isinstance(o, SnapshotRow) and _held_changed(o)]
        snaps += [(o, True) for o in s.deleted if isinstance(o, SnapshotRow)]
        builds = [(o, False) for o in s.new if isinstance(o, BuildVmRow)]
        builds += [(o, True) for o in s.deleted if isinstance(o, BuildVmRow)]
        if not changed and not snaps and not builds:
            return
        with s.no_autoflush:
            now = db_now(s)
            proven = _ENDING_AT.get()
            end = min(now, proven) if proven is not None else now
            for row, gone in changed:
                self.settle(s, row, end, gone)
            for snap, gone in snaps:
                settle_snapshot(s, snap, now, gone)
            for vm, gone in builds:
                self.settle_build(s, vm, end, gone)

    def settle(self, s: Session, row: ComputerRow, now: datetime, gone: bool = False) -> None:
        """Make the computer's open interval match its record: unchanged if it does; else
        closed at `now` and, unless the computer is `gone`, the next opened there."""
        current = open_interval(s, row.id)
        if current is not None and not gone and _matches(current, row):
            return
        ordinal = 1
        reading = Reading()
        if current is not None:
            if current.state in COMPUTE:
                reading = self.measure(row.id)
                seen = self.last_seen(row.id, row.host_id, current, now)  # a silent host's
                now = min(now, seen) if seen is not None else now  # the next opens there too
            close(s, current, now, reading)
            ordinal = current.ordinal + 1
        if not gone and row.state in COMPUTE and (current is None or current.state not in COMPUTE):
            # compute again after a time at rest: a counter that outlived it (the egress proxy
            # stays up across a pause) is marked where it is, or its total would count again
            reading = Reading(egress_bytes=self.measure(row.id).egress_bytes)
        if not gone:
            opened(s, row, now, ordinal, reading if row.state in COMPUTE else Reading())

    def settle_build(self, s: Session, vm: BuildVmRow, now: datetime, gone: bool) -> None:
        """A build VM's interval: opened with its record (before its VM is made: its counters
        start at 0), closed with a last reading when the record goes."""
        current = open_interval(s, vm.id)
        if gone:
            if current is not None:
                close(s, current, now, self.measure(vm.id))
            return
        if current is None:
            s.add(
                UsageRow(
                    kind="build",
                    org_id=vm.org_id,
                    computer_id=vm.id,
                    ordinal=1,
                    name=vm.template,
                    template=vm.template,
                    state=BUILD_STATE,
                    vcpus=vm.vcpus,
                    memory_mib=vm.memory_mib,
                    disk_gib=vm.disk_gib,
                    started_at=now,
                    checked_at=now,
                    cpu_mark_usec=0,
                )
            )


def settle_snapshot(s: Session, snap: SnapshotRow, now: datetime, gone: bool) -> None:
    """A snapshot or template layer holds its own bytes from when it is complete (`ready`,
    `layer`) until it is deleted: one open interval while it does, cut hourly like any at rest."""
    current = open_interval(s, snap.id)
    holds = not gone and snap.state in ("ready", "layer")
    if (
        current is not None
        and holds
        and (current.state, current.size_bytes) == (snap.state, snap.size_bytes)
    ):
        return
    if current is not None:
        close(s, current, now, Reading())
    if holds:
        s.add(
            UsageRow(
                kind="snapshot",
                org_id=snap.org_id,
                computer_id=snap.id,
                ordinal=current.ordinal + 1 if current is not None else 1,
                name=snap.name or snap.id,
                template=snap.template,
                state=snap.state,
                vcpus=0,
                memory_mib=0,
                disk_gib=0,
                size_bytes=snap.size_bytes,
                started_at=now,
                checked_at=now,
            )
        )


def _held_changed(snap: SnapshotRow) -> bool:
    state = inspect(snap)
    return any(state.attrs[name].history.has_changes() for name in ("state", "size_bytes"))


def _alloc_changed(row: ComputerRow) -> bool:
    state = inspect(row)
    return any(state.attrs[name].history.has_changes() for name in _TRACKED)


def _matches(interval: UsageRow, row: ComputerRow) -> bool:
    return (
        interval.state,
        interval.vcpus,
        interval.memory_mib,
        interval.disk_gib,
        interval.name,
    ) == (str(row.state), row.vcpus, row.memory_mib, row.disk_gib, row.name)


def open_interval(s: Session, computer_id: str) -> UsageRow | None:
    """The computer's (or snapshot's) open interval, locked until the transaction ends. On
    PostgreSQL a lock waited for can end with the interval closed and continued by the
    transaction that held it (the meter's cut, another node's transition): this statement then
    finds none, as its snapshot does not see the continuation, so it looks again (a new
    statement sees it). The partial unique index `usage_intervals_one_open` is the guard."""
    q = select(UsageRow).where(UsageRow.computer_id == computer_id, UsageRow.ended_at.is_(None))
    q = q.order_by(UsageRow.id.desc()).limit(1).with_for_update()
    found = s.scalars(q).first()
    if found is None and s.get_bind().dialect.name != "sqlite":
        found = s.scalars(q).first()
    return found


def opened(s: Session, row: ComputerRow, at: datetime, ordinal: int, reading: Reading) -> UsageRow:
    interval = UsageRow(
        kind="computer",
        org_id=row.org_id,
        computer_id=row.id,
        ordinal=ordinal,
        name=row.name,
        template=row.template,
        state=str(row.state),
        vcpus=row.vcpus,
        memory_mib=row.memory_mib,
        disk_gib=row.disk_gib,
        started_at=at,
        checked_at=at,
        cpu_mark_usec=reading.cpu_usec,
        egress_mark=reading.egress_bytes,
    )
    s.add(interval)
    return interval


def close(s: Session, interval: UsageRow, at: datetime, reading: Reading) -> None:
    """Close at `at` (never before it began), with a last reading, and give it its sequence
    number: the counter's row stays locked until this transaction commits, so numbers are
    visible in the order they were given and a cursor never skips one."""
    read_into(interval, reading)
    interval.ended_at = max(at, interval.started_at)
    interval.checked_at = interval.ended_at
    q = select(UsageSequenceRow).where(UsageSequenceRow.id == 1).with_for_update()
    counter = s.scalars(q).one()
    counter.value += 1
    interval.seq = counter.value


def rotate(s: Session, interval: UsageRow, at: datetime, reading: Reading) -> UsageRow:
    """Close an interval at `at` and open its continuation (same state and allocation)."""
    close(s, interval, at, reading)
    nxt = UsageRow(
        kind=interval.kind,
        org_id=interval.org_id,
        computer_id=interval.computer_id,
        ordinal=interval.ordinal + 1,
        name=interval.name,
        template=interval.template,
        state=interval.state,
        vcpus=interval.vcpus,
        memory_mib=interval.memory_mib,
        disk_gib=interval.disk_gib,
        size_bytes=interval.size_bytes,
        started_at=interval.ended_at,
        checked_at=at,
        cpu_mark_usec=interval.cpu_mark_usec,
        egress_mark=interval.egress_mark,
    )
    s.add(nxt)
    return nxt


def hour_floor(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def due_at(interval: UsageRow, now: datetime, running_period: float) -> datetime | None:
    """When an open interval must be cut: a computer with compute every `running_period`
    seconds (at `now`), one at rest at each hour boundary it crossed (at the last one)."""
    if interval.state in COMPUTE:
        age = (now - interval.started_at).total_seconds()
        return now if age >= running_period else None
    boundary = hour_floor(now)
    return boundary if interval.started_at < boundary else None


def proven_until(s: Session, computer_id: str) -> datetime | None:
    current = open_interval(s, computer_id)
    return current.checked_at if current is not None else None


def adopt(s: Session) -> int:
    """Open an interval, from now, for every computer and complete snapshot without one (made
    before metering)."""
    has = select(UsageRow.computer_id).where(UsageRow.ended_at.is_(None))
    rows = s.scalars(select(ComputerRow).where(ComputerRow.id.not_in(has))).all()
    snaps = s.scalars(select(SnapshotRow).where(SnapshotRow.id.not_in(has))).all()
    now = db_now(s) if rows or snaps else datetime.now(UTC)
    for snap in snaps:
        settle_snapshot(s, snap, now, False)
    for row in rows:
        last = s.scalar(
            select(UsageRow.ordinal)
            .where(UsageRow.computer_id == row.id)
            .order_by(UsageRow.ordinal.desc())
            .limit(1)
        )
        opened(s, row, now, (last or 0) + 1, Reading())
    return len(rows)
