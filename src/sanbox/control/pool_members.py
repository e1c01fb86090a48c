"""A warm pool's members as a claim sees them now: the one reading `pools.py`'s status and its
refill share, by the rule a claim selects with (`pool_claims.claimable`).

- **ready**: running and warmed, on a host that is `up` and answers, in the region a create that
  asks for none would run in: exactly what a claim could take now;
- **starting**: being made, or running on such a host and still warming;
- **unavailable**: the rest: running on a host that is away (suspect, lost, not answering this
  node) or draining, in a region the org no longer runs in, or waiting to be discarded.

The refill sizes the pool on the members it keeps less those on a host declared `lost` (the
fleet's judgement, not this node's link, which a node that just started has not made yet, nor
should it replace every member for that; nor a host `suspect` for a moment, whose every dropout
would otherwise make the pool's size in restores and, once it is back, as many deletes), so a
pool whose members are stranded on a lost host gets replacements; the members on that host are
kept hidden (they cannot be removed while it does not answer) and, once it is back, are extras
the refill trims. Members on a host that is suspect or does not answer this node are kept and
counted by the refill, not claimable: the status says the pool `waiting` for them. A pool
holds at most `HELD` times its size in members, whatever its hosts do: a host that comes and
goes cannot make it grow further (the org's quota counts every member).

`discard_why` says which running members the refill discards rather than keeps: made from a
build of the template that is no longer its current one, outside the org's home region, on a
host forgotten as dead, or on a draining host. The last at once, not after their replacements
are ready: a claim never takes them (a claimed computer would have to move), so keeping them
serves no create; they hold the org's quota and the host's RAM a replacement may need, and a
replacement may not be makeable at all (an org template's build held by the draining host
only), which would keep the drain from ever emptying the host."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import select

from ..fleet.hosts import DRAINING, LOST, RETIRED
from ..store import repo
from ..store.fleet_models import HostRow
from ..store.models import ComputerRow, Org, PoolRow
from . import placing
from .fleet import Fleet
from .pool_claims import claimable
from .states import State

HELD = 2  # a pool holds at most HELD x its size in members (the others wait on hosts away)


@dataclass(frozen=True)
class Members:
    """A pool's members, and what decides which a claim takes or the refill discards."""

    all: list[ComputerRow]  # oldest first
    claimable: frozenset[str]  # ids of the running members a claim could take now
    current: frozenset[str | None] | None  # the template's current builds (None: any)
    home: str | None  # the org's home region, once fleet hosts have joined (None: any)
    away: frozenset[str]  # hosts declared lost
    retired: frozenset[str]  # hosts forgotten as dead
    draining: frozenset[str]  # hosts being emptied


@dataclass(frozen=True)
class Counts:
    ready: int
    starting: int
    unavailable: int
    waiting: int = 0  # of the unavailable: kept and counted by the refill, not claimable now


def look(fleet: Fleet, pool: PoolRow) -> Members:
    """The pool's members and what a claim would take of them now, read in one session."""
    with fleet.db.session() as s:
        members = repo.pool_members(s, pool.id)
        running = select(ComputerRow.id).where(
            ComputerRow.pool == pool.id, ComputerRow.state == State.RUNNING
        )
        takeable = s.scalars(running.where(claimable(fleet, pool.org_id, pool.template, None)))
        built = repo.templates_named(s, pool.org_id, pool.template, None)  # every region's
        home = s.scalar(select(Org.home_region).where(Org.id == pool.org_id))
        q = select(HostRow.id, HostRow.state)
        q = q.where(HostRow.state.in_((LOST, RETIRED, DRAINING)))
        hosts = {host_id: state for host_id, state in s.execute(q)}
        current = frozenset(sid for t in built for sid in (t.snapshot_id, t.ready_snapshot_id))
        return Members(
            all=members,
            claimable=frozenset(takeable),
            current=current or None,
            home=home if home is not None and placing.wanted(fleet, None, False) else None,
            away=frozenset(h for h, state in hosts.items() if state == LOST),
            retired=frozenset(h for h, state in hosts.items() if state == RETIRED),
            draining=frozenset(h for h, state in hosts.items() if state == DRAINING),
        )


def count(members: Members, warming: Collection[str]) -> Counts:
    """Ready, starting and unavailable members (`warming`: the ones this node is warming)."""
    ready = starting = 0
    for m in members.all:
        if m.state == State.CREATING:
            starting += 1
        elif m.state == State.RUNNING and m.id in members.claimable:
            if m.id in warming:
                starting += 1
            else:
                ready += 1
    waiting = sum(
        m.state == State.RUNNING
        and m.id not in members.claimable
        and discard_why(m, members) is None
        and not away(m, members)
        for m in members.all
    )
    return Counts(ready, starting, len(members.all) - ready - starting, waiting)


def refill_state(size: int, counts: Counts, blocked: str | None) -> str:
    """What the refill does: "full", "filling", "shrinking", "waiting: ..." (members it keeps are
    on hosts that do not answer now: suspect, or not reached by this node), or "blocked: why"
    (`blocked`: why its last attempt was refused)."""
    if blocked is not None:
        return blocked
    have = counts.ready + counts.starting
    if have > size:
        return "shrinking"
    if have == size and not counts.starting:
        return "full"
    if have < size and have + counts.unavailable >= HELD * size:
        return f"blocked: {counts.unavailable} members wait on hosts that are away"
    if have < size and have + counts.waiting >= size:  # the refill counts them: makes none
        return f"waiting: {counts.waiting} members on hosts that do not answer now"
    return "filling"


def away(member: ComputerRow, members: Members) -> bool:
    """Whether the refill replaces a running member it keeps: its host was declared lost."""
    return member.host_id is not None and member.host_id in members.away


def discard_why(member: ComputerRow, members: Members) -> str | None:
    """Why the refill discards a running member rather than keep it (None: it keeps it)."""
    if members.current is not None and member.origin not in members.current:
        return "the template was rebuilt: replaced"
    if members.home is not None and member.region != members.home:
        return f"its org's home region is {members.home} now: replaced"
    if member.host_id is not None and member.host_id in members.retired:
        return "its host was forgotten as dead: replaced"
    if member.host_id is not None and member.host_id in members.draining:
        return "its host is draining: replaced on a host that takes new computers"
    return None
