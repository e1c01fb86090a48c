"""Creating a computer: validate the request (nothing is written for bad input), insert the
record in `creating` (or return the one an idempotency key made), then provision it on its host
(provision.py) in a task the request may wait for. A failed provision leaves no VM, no disk, no
folder."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field

from sqlalchemy.orm import Session

from ..host.door import (
    GIB,
    PolicyError,
    recipe_for,
)
from ..store import repo
from ..store.models import ComputerRow, Org, SnapshotRow
from . import deadlines, placing, quotas, regions, snapshots, template_lookup, templates
from .errors import (
    ConflictError,
    InvalidRequestError,
)
from .fleet import VERB_WAIT, Fleet
from .names import check_env, check_labels, check_metadata, check_name, generate_name
from .provision import Plan, provision, release
from .secrets import bind_in, check_bindable
from .states import State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CreateRequest:
    template: str | None = None  # None: base, or the snapshot's
    name: str | None = None
    vcpus: int | None = None  # None: 1, or the snapshot's
    memory_mib: int | None = None  # None: 512, or the snapshot's
    disk_gib: int | None = None  # None: the image's size, or the snapshot's
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    e2b_metadata: dict[str, str] | None = None  # E2B's, any keys (names.check_metadata)
    idle_timeout: int | None = None  # seconds; None = the template's; 0 = never
    allow: tuple[str, ...] | None = None  # egress allowlist; None = the template's
    from_snapshot: str | None = None  # a snapshot of the org (id or name)
    secrets: tuple[tuple[str, str | None], ...] = ()  # (secret name, env var) to bind
    lifetime: int = 0  # seconds from its creation, then stopped or deleted; 0 = none
    on_lifetime: str = "stop"  # stop | delete
    wake_lifetime: int | None = None  # seconds from a wake after a lifetime that suspends
    max_running: int = 0  # seconds of running since its last start, then stopped; 0 = none
    region: str | None = None  # where it runs (one the org may use); None: its home region

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def _from_snapshot(fleet: Fleet, org: Org, req: CreateRequest) -> SnapshotRow:
    assert req.from_snapshot is not None
    snap = snapshots.get(fleet, org, req.from_snapshot)
    if req.template is not None and req.template != snap.template:
        raise InvalidRequestError(
            f"snapshot {snap.id} is of template {snap.template}: a computer made from it has "
            "that template; leave template out"
        )
    if snap.memory and (
        (req.vcpus is not None and req.vcpus != snap.vcpus)
        or (req.memory_mib is not None and req.memory_mib != snap.memory_mib)
    ):
        raise InvalidRequestError(
            f"snapshot {snap.id} keeps memory saved with {snap.vcpus} vCPU(s) and "
            f"{snap.memory_mib} MiB: leave vcpus and memory_mib out (or take a disk-only "
            "snapshot to change them)"
        )
    return snap


def check(fleet: Fleet, req: CreateRequest) -> None:
    """What a request must be whatever serves it (a boot, a restore, a pool's member): names,
    labels, environment, allowlist rules, idle timeout, deadlines. Nothing is made before."""
    if req.name is not None:
        check_name(req.name)
    if req.template is not None:
        check_name(req.template, "template")
    check_labels(req.labels)
    if req.e2b_metadata is not None:
        check_metadata(req.e2b_metadata)
    check_env(req.env)
    if req.allow is not None:
        try:
            fleet.reach.policy(list(req.allow))
        except PolicyError as exc:
            raise InvalidRequestError(str(exc), "invalid_rule") from exc
    if req.idle_timeout is not None and req.idle_timeout < 0:
        raise InvalidRequestError("idle_timeout is seconds, 0 (never) or more")
    deadlines.check(req.lifetime, req.on_lifetime, req.max_running, req.wake_lifetime)


def validate(fleet: Fleet, org: Org, req: CreateRequest) -> Plan:
    check(fleet, req)
    snap = _from_snapshot(fleet, org, req) if req.from_snapshot is not None else None
    own = None
    if snap is None and req.template is not None and not templates.builtin(req.template):
        own = template_lookup.resolve(
            fleet, org, req.template, req.vcpus, req.memory_mib, req.region
        )
    base = snap or (own.template if own else None)  # what the defaults come from
    vcpus = req.vcpus if req.vcpus is not None else (base.vcpus if base else 1)
    memory_mib = (
        req.memory_mib if req.memory_mib is not None else (base.memory_mib if base else 512)
    )
    if vcpus < 1 or memory_mib < 128:
        raise InvalidRequestError("ask for at least 1 vCPU and 128 MiB of memory")
    template = snap.template if snap else (req.template or "base")
    start: SnapshotRow | None = snap
    if own is not None:
        image, start = own.image, own.snapshot
        floor_gib = max(start.disk_gib, -(-image.disk_size_bytes // GIB))
    else:
        image = fleet.image_for(template, snap.image if snap else None)
        floor_gib = snap.disk_gib if snap else -(-image.disk_size_bytes // GIB)
    disk_gib = req.disk_gib if req.disk_gib is not None else floor_gib
    if disk_gib < floor_gib:
        what = f"snapshot {snap.id}" if snap else f"the {template} image"
        raise InvalidRequestError(
            f"a {disk_gib} GiB disk is smaller than {what} ({floor_gib} GiB): ask for at least "
            f"{floor_gib} GiB",
            "disk_too_small",
        )
    recipe = recipe_for(template) if base is None else None  # a built-in's defaults
    default_allow = base.allow if base else (recipe.allow if recipe else [])
    default_idle = base.idle_timeout if base else (recipe.idle_timeout if recipe else 0)
    # a computer of an org's template gets its ports and secrets, made from a snapshot too
    spec = own.template if own else None
    if snap is not None:
        spec = template_lookup.built_as(fleet, org.id, snap.template, None)
    bound = {name: (env or None) for name, env in (spec.secrets if spec else {}).items()}
    bound.update(dict(req.secrets))
    wanted = tuple(bound.items())
    check_bindable(fleet, org, wanted, template)
    # before anything is made: refused here leaves no record and no folder (a placed create is
    # admitted by its placement, after its record: placing.py)
    placed = placing.wanted(fleet, start.host_id if start else None, start is not None)
    held = start.host_id if start else None
    region = regions.of_create(fleet, req.region, held, start is not None, placed)
    hold = None
    if not placed:  # a placed one is sized against the fleet's hosts by its placement
        fleet.capacity.check(vcpus, memory_mib)
        hold = fleet.capacity.admit_here(fleet.runtime, memory_mib, disk_gib)
    return Plan(
        template=template,
        image=image,
        vcpus=vcpus,
        memory_mib=memory_mib,
        disk_gib=disk_gib,
        env={**(base.env if base else {}), **req.env},
        allow=list(req.allow if req.allow is not None else default_allow),
        idle_timeout=req.idle_timeout if req.idle_timeout is not None else default_idle,
        snapshot=start,
        origin=start.id if start else None,
        hold=hold,
        from_template=own is not None,
        booted_because=own.booted_because if own else None,
        ports=tuple(spec.ports) if spec else (),
        secrets=wanted,
        placed=placed,
        region=region,
    )


def insert(
    fleet: Fleet,
    org: Org,
    req: CreateRequest,
    plan: Plan,
    idempotency_key: str | None,
    pool: str | None = None,
) -> tuple[ComputerRow, bool]:
    """Insert the record in `creating` (refused past the org's quota, in the same transaction);
    or return the one this idempotency key made. A `pool`'s
    member gets a name no user can give (`pool.…`: names are DNS labels) until it is claimed."""
    with fleet.db.session() as s:
        prior = _previous(s, org, req, idempotency_key)
        if prior is not None:
            return prior, False
        quotas.check(s, org.id, quotas.Use.computer(plan.vcpus, plan.memory_mib, plan.disk_gib))
        cid = repo.new_id("cmp_")
        name = req.name or (f"pool.{cid[4:]}" if pool else generate_name())
        if repo.name_taken(s, org.id, name):
            raise ConflictError(
                f"a computer named {name!r} already exists: pick another name", "name_taken"
            )
        hypervisor, _ = fleet.runtime.driver_facts()
        row = ComputerRow(
            id=cid,
            org_id=org.id,
            name=name,
            template=plan.template,
            pool=pool,
            image=plan.image.build_id,
            state=State.CREATING,
            vcpus=plan.vcpus,
            memory_mib=plan.memory_mib,
            disk_gib=plan.disk_gib,
            env=plan.env,
            allow=plan.allow,
            ports=[{"port": p, "public": False} for p in plan.ports],
            idle_timeout=plan.idle_timeout,
            labels=req.labels,
            hypervisor=hypervisor,
            e2b_metadata=req.e2b_metadata,
            isolation="",
            idempotency_key=idempotency_key,
            request_hash=req.digest(),
            origin=plan.origin,
            identity_pending=pending_identity(plan),
            lifetime=req.lifetime,
            on_lifetime=req.on_lifetime,
            wake_lifetime=req.wake_lifetime,
            max_running=req.max_running,
            host_id=plan.host_id,
            region=plan.region,
        )
        s.add(row)
        s.flush()
        bind_in(s, org.id, row.id, plan.secrets)
        source = f"template {plan.template}"
        if plan.origin is not None and not plan.from_template:
            source = f"snapshot {plan.origin}" if plan.snapshot else f"a fork of {plan.origin}"
        ev = repo.add_event(s, org.id, row.id, "computer.creating", f"creating from {source}")
    fleet.bus.publish(ev)
    if plan.secrets and fleet.book is not None:
        fleet.book.changed()
    return row, True


async def _made(
    fleet: Fleet, org: Org, req: CreateRequest, idempotency_key: str | None
) -> ComputerRow | None:
    """What this idempotency key made. A pool member being handed to it (`claim` pending: its
    hostname, disk and policy being set) is waited for under its lock, and read again as the
    claim left it: running, or discarded and another supply made under the same key."""
    for _ in range(4):  # a claim tries three members
        with fleet.db.session() as s:
            prior = _previous(s, org, req, idempotency_key)
        if prior is None or prior.identity_pending != "claim":
            return prior
        async with fleet.operating(prior.id, "create", prior.host_id, wait=VERB_WAIT):
            pass
    return prior


def _previous(
    s: Session, org: Org, req: CreateRequest, idempotency_key: str | None
) -> ComputerRow | None:
    """The computer this idempotency key made (for this same request), if any."""
    if not idempotency_key:
        return None
    prior = repo.computer_by_idempotency_key(s, org.id, idempotency_key)
    if prior is not None and prior.request_hash != req.digest():
        raise ConflictError(
            "this Idempotency-Key was used for a different request", "idempotency_conflict"
        )
    return prior


def pending_identity(plan: Plan) -> str | None:
    """What a new computer is a copy of, until its own identity is given: `copy` (a snapshot's
    disk or memory, an org's template), `fork` (a computer's), None (booted from an image: the
    identity it boots with is its own)."""
    if plan.snapshot is not None:
        return "copy"
    return "fork" if plan.origin is not None else None


Supply = Callable[[Org, CreateRequest, "str | None"], Awaitable["ComputerRow | None"]]


async def create(
    fleet: Fleet,
    org: Org,
    req: CreateRequest,
    idempotency_key: str | None = None,
    wait: bool = True,
    supply: Supply | None = None,
) -> ComputerRow:
    """The one create path: a retry returns what its idempotency key made; the request is
    checked; then a `supply` (a warm pool) may serve it with a member, else it is planned
    (admitted) and provisioned: booted from an image, restored from a snapshot or a template."""
    prior = await _made(fleet, org, req, idempotency_key)
    if prior is not None:
        return prior
    check(fleet, req)
    regions.check(fleet, org, req.region)
    if supply is not None:
        claimed = await supply(org, req, idempotency_key)
        if claimed is not None:
            return claimed
    plan = validate(fleet, org, req)
    try:
        row, new = insert(fleet, org, req, plan, idempotency_key)
    except BaseException:
        release(plan)
        raise
    if not new:
        release(plan)
        return row
    task = fleet.spawn(provision(fleet, row, plan))
    if not wait:
        return row
    return await asyncio.shield(task)
