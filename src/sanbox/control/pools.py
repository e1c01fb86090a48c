"""Warm pools: computers of a template kept running, ready and unclaimed, so a create is a claim.

`sanbox pool set TEMPLATE --size N` records the pool; a refill loop keeps N members: computers
of the org's template (restored from its ready snapshot) whose record names the pool and is
hidden from every listing and lookup, idle timeout off. Members run (rather than sit paused):
a paused one would have to be restored at claim, ~1 s here, where a running one is handed over in
milliseconds; the price is their RAM, which admission counts like any computer's, so a pool never
grows past what the host can hold (its state says `blocked: why`).

A create of a pooled template (one that names none: `base`), asking for no other vCPUs or
memory than the pool's computers have, claims the oldest running member in one database
transaction (the record leaves the pool and takes the request's name, labels, environment, policy
and idle timeout), then applies what lives in the VM: its hostname (the rest of its identity is
its own since its restore; a claim that names no computer takes the name the member's warm-up
gave its guest, and nothing is asked of the guest for it), a larger disk if asked (grown live,
its filesystem with it) and its egress policy. If any of it fails the computer is discarded and
the next member claimed, or the create made the ordinary way: a claim is never handed out
half-configured.
Members survive a server restart like any computer (the reconciler re-attaches them; one this
node does not hold, on a fleet host or made by another API node, is attached at its claim) and the
loop refills or trims the pool; a member that is not running, or that came from a build of the
template that is no longer its current one, is discarded, never leaked nor handed out stale.
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
from datetime import UTC, datetime

from sqlalchemy import select

from ..host.door import GIB, Policy, faults
from ..store import repo
from ..store.models import ComputerRow, Org, PoolRow
from . import create as creating
from . import lifecycle, pool_warmup, quotas, readiness, template_lookup, templates
from . import provision as provisioning
from .capacity import Hold
from .errors import ConflictError, ControlError, InvalidRequestError
from .fleet import VERB_WAIT, Fleet
from .jobs import POOLS
from .names import check_name, generate_name
from .secrets import bind_in
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
    ready: int  # running members whose warm-up has run
    starting: int  # members being made or warmed
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
        out = []
        with self.fleet.db.session() as s:
            for pool in repo.list_pools(s, org.id):
                members = repo.pool_members(s, pool.id)
                ready = sum(m.state == State.RUNNING and m.id not in self._warming for m in members)
                starting = sum(
                    m.state == State.CREATING
                    or (m.state == State.RUNNING and m.id in self._warming)
                    for m in members
                )
                refill = self._blocked.get(pool.id)
                if refill is None:
                    have = ready + starting
                    refill = (
                        "full"
                        if have == pool.size and not starting
                        else ("shrinking" if have > pool.size else "filling")
                    )
                out.append(PoolStatus(pool, ready, starting, refill))
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
        for _ in range(3):  # a member that cannot be configured is discarded, the next tried
            taken = self._take(org, pool, req, idempotency_key)
            if taken is None:
                self.wake()  # an empty pool: refill now
                return None
            row, hold = taken
            faults.reached("pool.claimed")
            named = self._hostnames.pop(row.id, None) == row.name  # its guest's hostname already
            self._claiming += 1  # its member has left the pool: no replacement until it is set
            try:
                claimed = await self._apply(row, named)
            except Exception as exc:
                log.warning("claimed %s could not be configured: %s", row.id, exc)
                await self.discard(row.id, f"not handed out: configuring it failed ({exc})")
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

    def _take(
        self, org: Org, pool: PoolRow, req: creating.CreateRequest, idempotency_key: str | None
    ) -> tuple[ComputerRow, Hold | None] | None:
        """One transaction: the oldest running member leaves the pool as the request's, with the
        room its disk's growth takes on this host held (refused as any create's would be, the
        member left in its pool)."""
        fleet = self.fleet  # the request was checked (create.check) before any supply
        hold: Hold | None = None
        try:
            with fleet.db.session() as s:
                q = select(ComputerRow).where(
                    ComputerRow.pool == pool.id, ComputerRow.state == State.RUNNING
                )
                if req.region is not None:  # a member of the region asked for, or none
                    q = q.where(ComputerRow.region == req.region)
                q = q.order_by(ComputerRow.created_at, ComputerRow.id).limit(1)
                row = s.scalars(q.with_for_update(skip_locked=True)).first()
                if row is None or not _fits(row, req):
                    return None
                if req.name is not None:
                    check_name(req.name)
                warmed = self._hostnames.get(row.id) if req.name is None else None
                if warmed is not None and not repo.name_taken(s, org.id, warmed):
                    name = warmed  # its guest's hostname already
                else:  # named, never warmed, or its warm-up's name taken since: `_apply` sets it
                    name = req.name or generate_name()
                    if repo.name_taken(s, org.id, name):
                        raise ConflictError(
                            f"a computer named {name!r} already exists: pick another name",
                            "name_taken",
                        )
                grow = max(0, (req.disk_gib or 0) - row.disk_gib)
                if grow:  # a member counts against the org already: only its growth is new
                    quotas.check(s, org.id, quotas.Use(disk_gib=grow))
                    hold = fleet.capacity.admit_here(fleet.host_of(row), 0, grow, row.id)
                row.pool, row.name, row.labels = None, name, dict(req.labels)
                row.e2b_metadata = req.e2b_metadata
                # the request's computer begins now: its lifetime and running time count from here
                row.created_at = row.started_at = datetime.now(UTC)
                row.lifetime, row.on_lifetime = req.lifetime, req.on_lifetime
                row.max_running = req.max_running
                row.disk_gib = max(row.disk_gib, req.disk_gib or 0)  # grown at claim
                row.env = {**row.env, **req.env}
                if req.allow is not None:
                    row.allow = list(req.allow)
                idle = req.idle_timeout
                row.idle_timeout = (
                    idle if idle is not None else templates.idle_timeout(fleet, org, row.template)
                )
                row.idempotency_key, row.request_hash = idempotency_key, req.digest()
                row.identity_pending = "claim"  # its hostname, disk and policy: `_apply`
                bind_in(s, org.id, row.id, req.secrets)  # its template's are bound already
                s.flush()
                s.expunge(row)
        except BaseException:  # nothing was handed out: its room is not held
            if hold is not None:
                hold.release()
            raise
        if req.secrets and fleet.book is not None:
            fleet.book.changed()
        return row, hold

    async def _apply(self, row: ComputerRow, named: bool) -> ComputerRow:
        """What lives in the VM: hostname (unless `named`: its guest has it already) and egress
        policy. Raises if either fails. Its template's readiness check runs meanwhile (it only
        reads the guest: its round trip overlaps the host's steps), and is awaited before the
        claim answers running."""
        fleet = self.fleet
        async with fleet.operating(row.id, "claim", row.host_id, wait=VERB_WAIT):
            # attached here if this node did not start it (another API node, a restart)
            machine = await fleet.machine_locked(row)
            settling = asyncio.ensure_future(readiness.settle_computer(fleet, row, machine))
            try:
                if not named:
                    await (await machine.client(timeout=5.0)).set_hostname(row.name)
                await fleet.host_of(row).grow_disk(machine, row.disk_gib * GIB)
                egress = fleet.egress_of(row)
                if egress is not None:
                    await egress.set_policy(row.id, Policy.of(row.allow))
                await fleet.trust_secrets(row.id, machine)  # the claim's own secrets, if any
                unready = await settling
            except BaseException:  # a step failed: the member is discarded, its check not waited
                settling.cancel()
                settling.add_done_callback(lambda t: t.cancelled() or t.exception())
                raise
            fleet.touch(row.id)
            running = fleet.record(
                row.id,
                State.RUNNING,
                "computer.running",
                f"running ({row.isolation}); claimed from the warm pool of {row.template}",
                {"start": "claimed", "memory": "restored"},
                identity_pending=None,
            )
            if unready is not None:
                readiness.not_ready(fleet, row.id, unready)
            return running

    # members --------------------------------------------------------------------------------

    async def discard(self, computer_id: str, why: str) -> None:
        self._hostnames.pop(computer_id, None)
        fleet = self.fleet
        async with fleet.operating(computer_id, "delete", wait=VERB_WAIT):
            await lifecycle.destroy_locked(fleet, computer_id, why)

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
                await self.discard(row.id, f"pool member failed: {exc.message}")
                return
            await pool_warmup.warm(fleet, row.id, functools.partial(self._remember, row.id))
        finally:
            self._warming.discard(row.id)

    def _remember(self, computer_id: str, name: str) -> None:
        """The hostname a warm-up gave a member (a claim that names none keeps it)."""
        if len(self._hostnames) < MAX_HOSTNAMES:
            self._hostnames[computer_id] = name

    async def refill(self, pool: PoolRow) -> None:
        """Discard members that do not run, trim extras, make one missing member."""
        with self.fleet.db.session() as s:
            members = repo.pool_members(s, pool.id)
            built = repo.templates_named(s, pool.org_id, pool.template, None)  # every region's
        current = {sid for t in built for sid in (t.snapshot_id, t.ready_snapshot_id)} or None
        live = []
        for m in members:
            if self.fleet.lock(m.id).locked():
                live.append(m)  # being made or claimed right now
            elif m.state != State.RUNNING and m.state != State.CREATING:
                await self.discard(m.id, f"pool member was {m.state}: replaced")
            elif current is not None and m.state == State.RUNNING and m.origin not in current:
                await self.discard(m.id, "the template was rebuilt: replaced")
            else:
                live.append(m)
        extra = len(live) - pool.size
        for m in [m for m in reversed(live) if m.state == State.RUNNING][: max(0, extra)]:
            await self.discard(m.id, "the pool shrank")
        if len(live) < pool.size:
            await self._make(pool)

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
            for pool in pools:
                try:
                    await self.refill(pool)
                except Exception:
                    log.exception("refill of pool %s failed", pool.id)
            busy = any(self._short(p) for p in pools)
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), REFILL_INTERVAL)

    def _short(self, pool: PoolRow) -> bool:
        if pool.id in self._blocked:
            return False
        with self.fleet.db.session() as s:
            return len(repo.pool_members(s, pool.id)) != pool.size


def _fits(row: ComputerRow, req: creating.CreateRequest) -> bool:
    """Whether a member is what the request asks for (a larger disk is grown at claim)."""
    return req.vcpus in (None, row.vcpus) and req.memory_mib in (None, row.memory_mib)
