"""A warm-pool claim's member (`pools.py` tries up to three): taken in one transaction, configured
in its VM under its lock, or given up as a whole.

- **Which member.** The oldest running one of the pool that fits the request, on a host that is
  `up` and answers this node (or on this server's own host), in the region an ordinary create of
  the request would run in now (the one asked for, else the org's home region once fleet hosts
  have joined): `claimable`. A member on a host that is away or draining (it would have to
  move), or in a region the org no longer runs in, is left where it is and the next one taken,
  or none (the create is then made the ordinary way); the pool's refill replaces it.
- **Taken.** One transaction: the record leaves the pool as the request's computer (its name,
  labels, environment, policy, idle timeout, Idempotency-Key, secrets), `identity_pending`
  `claim` until its VM is configured, with the room its disk's growth takes held.
- **Configured.** Its hostname, disk and egress policy in the VM, its readiness check awaited;
  then it answers running.
- **Given up.** If configuring fails, under the same lock, the record is a pool member again
  before anyone sees it (its `pool.…` name, no Idempotency-Key: a retry makes a create of its
  own), in `error`: the caller's computer does not exist. So is a member another API node's
  operation holds past the claim's wait. The pool's refill, woken at once, destroys it (one whose
  host does not answer once the host does; its record dropped once the host is forgotten): the
  caller waits for neither."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, and_, exists, or_, select, union

from ..fleet.errors import BusyError
from ..fleet.hosts import UP
from ..fleet.regions import region_for
from ..host.door import GIB, Policy
from ..store import repo
from ..store.fleet_models import HostRow
from ..store.models import ComputerRow, Org, PoolRow, TemplateRow
from . import create as creating
from . import placing, quotas, readiness, templates
from .capacity import Hold
from .errors import ConflictError, NotFoundError
from .fleet import VERB_WAIT, Fleet
from .names import check_name, generate_name
from .secrets import bind_in
from .states import State


def take(
    fleet: Fleet,
    org: Org,
    pool: PoolRow,
    req: creating.CreateRequest,
    idempotency_key: str | None,
    hostnames: Mapping[str, str],
) -> tuple[ComputerRow, Hold | None] | None:
    """One transaction: the oldest claimable member leaves the pool as the request's, with the
    room its disk's growth takes on its host held (refused as any create's would be, the member
    left in its pool). `hostnames`: the names members' warm-ups gave their guests."""
    hold: Hold | None = None  # the request was checked (create.check) before any supply
    try:
        with fleet.db.session() as s:
            q = select(ComputerRow).where(
                ComputerRow.pool == pool.id, ComputerRow.state == State.RUNNING
            )
            q = q.where(claimable(fleet, org.id, pool.template, req.region))
            q = q.order_by(ComputerRow.created_at, ComputerRow.id).limit(1)
            row = s.scalars(q.with_for_update(skip_locked=True)).first()
            if row is None or not fits(row, req):
                return None
            if req.name is not None:
                check_name(req.name)
            warmed = hostnames.get(row.id) if req.name is None else None
            if warmed is not None and not repo.name_taken(s, org.id, warmed):
                name = warmed  # its guest's hostname already
            else:  # named, never warmed, or its warm-up's name taken since: `apply` sets it
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
            row.wake_lifetime = req.wake_lifetime
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
            row.identity_pending = "claim"  # its hostname, disk and policy: `apply`
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


def claimable(fleet: Fleet, org_id: str, template: str, region: str | None) -> ColumnElement[bool]:
    """Which running members of the org's pool of `template` a claim takes now, for a create
    that asks for `region` (None: none): on a host that answers (`_answering`), in the region the
    create would run in (`_region`), made from one of the template's current builds (after a
    rebuild, the old build's members are the refill's to discard, never a caller's computer).
    The one rule a claim selects by and a pool's status and refill count by
    (`pool_members.py`): a pool's `ready` is what a claim could take."""
    where = and_(_answering(fleet), _current(org_id, template))
    if (in_region := _region(fleet, org_id, region)) is not None:
        where = and_(where, ComputerRow.region == in_region)
    return where


def _current(org_id: str, template: str) -> ColumnElement[bool]:
    """Made from a current build of the org's `template` (any member of a built-in one)."""
    t = TemplateRow
    named = and_(t.org_id == org_id, t.name == template)
    builds = union(
        select(t.snapshot_id).where(named, t.snapshot_id.is_not(None)),
        select(t.ready_snapshot_id).where(named, t.ready_snapshot_id.is_not(None)),
    )
    return or_(~exists(select(t.id).where(named)), ComputerRow.origin.in_(builds))


def _answering(fleet: Fleet) -> ColumnElement[bool]:
    """Members on this server's own host, or on a fleet host that is `up` and whose report this
    node reads now (a host away would fail the claim, and leave its member unreachable)."""
    local = ComputerRow.host_id.is_(None)
    if fleet.remote is None:
        return local
    answering = fleet.remote.answering()
    up = select(HostRow.id).where(HostRow.state == UP, HostRow.id.in_(answering))
    return or_(local, ComputerRow.host_id.in_(up))


def _region(fleet: Fleet, org_id: str, asked: str | None) -> str | None:
    """The region a create asking for `asked` would be made in now (None: any): the one asked
    for, else, once fleet hosts have joined, its org's home region as it is set now."""
    if asked is not None or not placing.wanted(fleet, None, False):
        return asked
    return region_for(fleet.db, org_id, None)


def fits(row: ComputerRow, req: creating.CreateRequest) -> bool:
    """Whether a member is what the request asks for (a larger disk is grown at claim)."""
    return req.vcpus in (None, row.vcpus) and req.memory_mib in (None, row.memory_mib)


async def apply(
    fleet: Fleet, row: ComputerRow, named: bool, pool_id: str, grow: bool
) -> ComputerRow:
    """What lives in the VM: hostname (unless `named`: its guest has it already), disk (grown
    to the record's size if `grow`: the claim asked for more than the member has) and egress
    policy. Its template's readiness check runs meanwhile (it only reads the guest: its round
    trip overlaps the host's steps), and is awaited before the claim answers running. If any
    of it fails, the member is given back to `pool_id` in error (`give_back`) before its lock
    is let go, and the failure raised; so is one whose operation could not be taken (another
    API node's held it past the wait)."""
    try:
        async with fleet.operating(row.id, "claim", row.host_id, wait=VERB_WAIT):
            try:
                return await _configure(fleet, row, named, grow)
            except BaseException as exc:
                why = f"not handed out: configuring it failed ({exc})"
                give_back(fleet, row.id, pool_id, why)
                raise
    except BusyError as exc:
        give_back(fleet, row.id, pool_id, f"not handed out: {exc}")
        raise


async def _configure(fleet: Fleet, row: ComputerRow, named: bool, grow: bool) -> ComputerRow:
    # attached here if this node did not start it (another API node, a restart)
    machine = await fleet.machine_locked(row)
    settling = asyncio.ensure_future(readiness.settle_computer(fleet, row, machine))
    try:
        if not named:
            await (await machine.client(timeout=5.0)).set_hostname(row.name)
        if grow:  # else it has the size already: no call to its host
            await fleet.host_of(row).grow_disk(machine, row.disk_gib * GIB)
        egress = fleet.egress_of(row)
        if egress is not None:
            await egress.set_policy(row.id, Policy.of(row.allow))
        await fleet.trust_secrets(row.id, machine)  # the claim's own secrets, if any
        unready = await settling
    except BaseException:  # a step failed: the member is given up, its check not waited
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


def give_back(fleet: Fleet, computer_id: str, pool_id: str, why: str) -> None:
    """A claimed member whose claim failed, hidden in its pool again as one to discard: its
    `pool.…` name (the caller's name is free), no Idempotency-Key (a retry is a create of its
    own, never this), in error (the refill discards it, if its caller cannot now)."""
    with contextlib.suppress(NotFoundError):  # its record gone already: nothing to hide
        fleet.record(
            computer_id,
            State.ERROR,
            "computer.error",
            why,
            pool=pool_id,
            name=f"pool.{computer_id[4:]}",
            labels={},
            e2b_metadata=None,
            idempotency_key=None,
            request_hash=None,
            identity_pending=None,
            last_error=why,
        )
