"""Warm pools: computers of a template kept running, ready and unclaimed, so a create is a claim.

`sanbox pool set TEMPLATE --size N` records the pool; a refill loop keeps N members: computers
of the org's template (restored from its ready snapshot) whose record names the pool and is
hidden from every listing and lookup, idle timeout off. Members run (rather than sit paused):
a paused one would have to be restored at claim, ~1 s here, where a running one is handed over in
milliseconds; the price is their RAM, which admission counts like any computer's, so a pool never
grows past what the host can hold (its state says `blocked: why`).

A create of a pooled template (one that names none: `base`), asking for no other vCPUs or
memory than the pool's computers have, claims the oldest running member on a host that answers,
in the region the create would run in (`pool_claims.py`): one database transaction (the record
leaves the pool and takes the request's name, labels, environment, policy and idle timeout), then
what lives in the VM: its hostname (the rest of its identity is its own since its restore; a
claim that names no computer takes the name the member's warm-up gave its guest, and nothing is
asked of the guest for it), a larger disk if asked (grown live, its filesystem with it) and its
egress policy. If any of it fails the member goes back to its pool in error, hidden (nobody's
computer: a retry with the same Idempotency-Key makes a create of its own), and is discarded;
the next member is claimed, or the create made the ordinary way: a claim is never handed out
half-configured.
Members survive a server restart like any computer (the reconciler re-attaches them; one this
node does not hold, on a fleet host or made by another API node, is attached at its claim) and the
loop refills or trims the pool; a member that is not running, that came from a build of the
template that is no longer its current one, that is outside its org's home region, whose host
was forgotten, or whose host is draining (at once: `pool_members.py` says why), is discarded,
never leaked nor handed out stale. One whose host does not answer stays hidden, not handed out,
until the host can remove it, and is replaced meanwhile: the pool is sized, and its status
counted, on what a claim could take (`pool_members.py`); back, it is an extra, trimmed.
A member counts as ready once its warm-up has run (`pool_warmup.py`), not when it starts
running: a claim of one still warming waits for it, and under TCG a just-restored guest's warm-up
keeps a core busy. (An API node that did not make it, or a restarted one, counts it ready once
running.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass

from ..host.door import HostError, faults
from ..store import repo
from ..store.models import ComputerRow, Org, PoolRow
from . import create as creating
from . import lifecycle, pool_members, pool_warmup, template_lookup, templates
from . import pool_claims as claims
from . import provision as provisioning
from .errors import ControlError, InvalidRequestError
from .fleet import VERB_WAIT, Fleet
from .jobs import POOLS
from .names import check_name
from .states import State

log = logging.getLogger(__name__)

MAX_SIZE = 32
MAX_POOLS = 16  # pools of a size above 0, per org (SANBOX_ORG_MAX_POOLS)
MAX_MEMBERS = 64  # their sizes added up, per org (SANBOX_ORG_MAX_POOL_MEMBERS)
REFILL_INTERVAL = 2.0  # seconds between checks when nothing wakes the loop
REFILL_DELAY = 1.0  # seconds after a claim before its replacement is made
MAX_HOSTNAMES = 4096  # warmed members' names remembered (claims and discards forget theirs)


@dataclass(frozen=True)
class PoolStatus:
    pool: PoolRow
    ready: int  # members a claim could take now: warmed, on a host that answers, in region
    starting: int  # members being made or warmed
    unavailable: int  # members a claim cannot take: on a host away or draining, out of region
    refill: str  # "full", "filling", "shrinking" or "blocked: why"


class Pools:
    def __init__(
        self, fleet: Fleet, max_pools: int = MAX_POOLS, max_members: int = MAX_MEMBERS
    ) -> None:
        self.fleet = fleet
        self.max_pools, self.max_members = max_pools, max_members
        self._wake = asyncio.Event()
        self._blocked: dict[str, str] = {}  # pool id -> why the last refill was refused
        self._task: asyncio.Task[None] | None = None
        self._quiet_until = 0.0  # loop time before which no refill starts (after a claim)
        self._claiming = 0  # claims configuring their member: no refill starts meanwhile
        # member id -> the hostname its warm-up set: the name a claim naming none gives it
        self._hostnames: dict[str, str] = {}
        # members this node is making or warming: running ones count as starting, not ready
        self._warming: set[str] = set()

    # the records ----------------------------------------------------------------------------

    def set(self, org: Org, template: str, size: int) -> PoolRow:
        check_name(template, "template")
        if not 0 <= size <= MAX_SIZE:
            raise InvalidRequestError(f"a pool holds 0 to {MAX_SIZE} computers")
        if not templates.builtin(template):
            row = template_lookup.get(self.fleet, org, template)  # template_not_found otherwise
            template = row.name
        with self.fleet.db.session() as s:
            pool = repo.pool(s, org.id, template)
            self._check_bounds(repo.list_pools(s, org.id), template, size)
            if pool is None:
                pool = PoolRow(id=repo.new_id("pool_"), org_id=org.id, template=template, size=0)
                s.add(pool)
            pool.size = size
            s.flush()
        self._blocked.pop(pool.id, None)
        self.wake()
        return pool

    def _check_bounds(self, pools: list[PoolRow], template: str, size: int) -> None:
        """An org's pools are bounded: `max_pools` of a size above 0, `max_members` in all (each
        member is a running computer the org holds in reserve). Shrinking is always allowed."""
        others = [p for p in pools if p.template != template and p.size > 0]
        if size > 0 and len(others) + 1 > self.max_pools:
            raise InvalidRequestError(
                f"this org has {len(others)} pools, the most it may have: empty one "
                "(size 0) before making another",
                "too_many_pools",
            )
        members = sum(p.size for p in others)
        if members + size > self.max_members:
            raise InvalidRequestError(
                f"this org's pools would hold {members + size} computers; they may hold "
                f"{self.max_members} in all ({members} in its other pools)",
                "too_many_pool_members",
            )

    def status(self, org: Org) -> list[PoolStatus]:
        """Each of the org's pools, its members counted as a claim sees them now
        (`pool_members.py`): `ready` is exactly what a claim could take."""
        with self.fleet.db.session() as s:
            pools = repo.list_pools(s, org.id)
        out = []
        for pool in pools:
            counts = pool_members.count(pool_members.look(self.fleet, pool), self._warming)
            refill = pool_members.refill_state(pool.size, counts, self._blocked.get(pool.id))
            out.append(PoolStatus(pool, counts.ready, counts.starting, counts.unavailable, refill))
        return out

    # claims ---------------------------------------------------------------------------------

    async def claim(
        self, org: Org, req: creating.CreateRequest, idempotency_key: str | None
    ) -> ComputerRow | None:
        """A running member of the template's pool, made the request's computer; None if the
        request cannot be served from a pool (it is then created the ordinary way)."""
        if req.from_snapshot is not None:
            return None
        with self.fleet.db.session() as s:  # a create that names no template makes a base one
            pool = repo.pool(s, org.id, req.template or "base")
        if pool is None or pool.size == 0:
            return None
        for _ in range(3):  # a member that cannot be configured is given up, the next tried
            taken = claims.take(self.fleet, org, pool, req, idempotency_key, self._hostnames)
            if taken is None:
                self.wake()  # an empty pool: refill now
                return None
            row, hold = taken
            faults.reached("pool.claimed")
            named = self._hostnames.pop(row.id, None) == row.name  # its guest's hostname already
            self._claiming += 1  # its member has left the pool: no replacement until it is set
            try:
                # room is held exactly when the claim grows the member's disk (`take`)
                claimed = await claims.apply(self.fleet, row, named, pool.id, hold is not None)
            except Exception as exc:  # given back to its pool in error: nobody's computer,
                # discarded by the refill (not here: the caller would wait on its host, or on
                # another node's operation on it)
                log.warning("claimed %s could not be configured: %s", row.id, exc)
                self.wake()
                continue
            finally:
                self._claiming -= 1
                if hold is not None:
                    hold.release()  # grown (or discarded): its disk measures what it takes
            # the refill (a restore: seconds of CPU) waits until the claimer's first commands ran
            self._quiet_until = asyncio.get_running_loop().time() + REFILL_DELAY
            asyncio.get_running_loop().call_later(REFILL_DELAY, self.wake)
            return claimed
        return None

    # members --------------------------------------------------------------------------------

    async def discard(self, computer_id: str, why: str, pool_id: str) -> None:
        """Destroy a member of `pool_id`, its record read again under its operation: one that
        is no member of it any more (a claim took it since the caller looked) is left alone."""
        self._hostnames.pop(computer_id, None)
        fleet = self.fleet
        async with fleet.operating(computer_id, "delete", wait=VERB_WAIT):
            row = fleet.by_id(computer_id)
            if row is None or row.pool != pool_id:
                log.info("%s is no member of pool %s now: not discarded", computer_id, pool_id)
                return
            await lifecycle.destroy_locked(fleet, computer_id, why)

    async def _discard_or_leave(self, computer_id: str, why: str, pool_id: str) -> bool:
        """Discard a member; one whose host does not answer (or cannot remove it now) stays
        hidden in its pool, not running, and the refill tries again each round."""
        try:
            await self.discard(computer_id, why, pool_id)
        except (ControlError, HostError) as exc:
            log.info("pool member %s stays until its host can remove it: %s", computer_id, exc)
            return False
        return True

    async def _make(self, pool: PoolRow) -> None:
        fleet = self.fleet
        with fleet.db.session() as s:
            org = s.get(Org, pool.org_id)
        if org is None:
            return
        req = creating.CreateRequest(template=pool.template, idle_timeout=0)
        try:
            plan = creating.validate(fleet, org, req)
        except ControlError as exc:  # admission, a template being rebuilt, ...
            self._blocked[pool.id] = f"blocked: {exc.message}"
            return
        try:
            row, _ = creating.insert(fleet, org, req, plan, None, pool=pool.id)
        except ControlError as exc:  # the owner's quota: members count against it
            provisioning.release(plan)
            self._blocked[pool.id] = f"blocked: {exc.message}"
            return
        except BaseException:
            provisioning.release(plan)
            raise
        self._blocked.pop(pool.id, None)
        self._warming.add(row.id)  # ready once warm: a claim of it would wait for its warm-up
        try:
            try:
                await provisioning.provision(fleet, row, plan)
            except ControlError as exc:
                self._blocked[pool.id] = f"blocked: {exc.message}"
                await self.discard(row.id, f"pool member failed: {exc.message}", pool.id)
                return
            await pool_warmup.warm(fleet, row.id, functools.partial(self._remember, row.id))
        finally:
            self._warming.discard(row.id)

    def _remember(self, computer_id: str, name: str) -> None:
        """The hostname a warm-up gave a member (a claim that names none keeps it)."""
        if len(self._hostnames) < MAX_HOSTNAMES:
            self._hostnames[computer_id] = name

    async def refill(self, pool: PoolRow) -> bool:
        """Discard members that do not run or that a claim should no longer take
        (`pool_members.discard_why`: on a draining host among them), trim extras, make one
        missing member; whether the pool is still short of members (another round at once). The
        pool is sized on the members it keeps but those on a host that is away (by its lease:
        `pool_members.away`), which stay hidden until it answers (`_discard_or_leave`) and are
        replaced meanwhile, up to `pool_members.HELD` times the pool's size in all."""
        members = pool_members.look(self.fleet, pool)
        live, held = [], 0  # held: members kept that a claim cannot take now
        for m in members.all:
            if self.fleet.lock(m.id).locked():
                live.append(m)  # being made or claimed right now
            elif m.state != State.RUNNING and m.state != State.CREATING:
                said = f"pool member was {m.state}: replaced"
                gone = await self._discard_or_leave(m.id, said, pool.id)
                held += not gone
            elif m.state == State.RUNNING and (why := pool_members.discard_why(m, members)):
                held += not await self._discard_or_leave(m.id, why, pool.id)
            elif m.state == State.RUNNING and pool_members.away(m, members):
                held += 1  # kept until its host answers, replaced meanwhile
            else:
                live.append(m)
        extra = len(live) - pool.size
        for m in [m for m in reversed(live) if m.state == State.RUNNING][: max(0, extra)]:
            await self._discard_or_leave(m.id, "the pool shrank", pool.id)
        if len(live) >= pool.size or len(live) + held >= pool_members.HELD * pool.size:
            return False
        await self._make(pool)
        return len(live) + 1 < pool.size and pool.id not in self._blocked

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = self.fleet.spawn(self._loop())

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if (quiet := self._quiet_until - loop.time()) > 0:
                await asyncio.sleep(quiet)
            self._wake.clear()
            if self._claiming:  # a claim (waiting out its member's warm-up) ends, then refill
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), REFILL_INTERVAL)
                continue
            if not await self.fleet.jobs.holds(POOLS):  # another API node refills them
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), REFILL_INTERVAL)
                continue
            with self.fleet.db.session() as s:
                pools = repo.list_pools(s, None)
            busy = False
            for pool in pools:
                try:
                    busy = await self.refill(pool) or busy
                except Exception:
                    log.exception("refill of pool %s failed", pool.id)
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), REFILL_INTERVAL)
