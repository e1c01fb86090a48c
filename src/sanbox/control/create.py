"""Creating a computer: validate the request (nothing is written for bad input), insert the
record in `creating` (or return the one an idempotency key made), then provision it on the host in
a task the request may wait for. A failed provision leaves no VM, no disk, no folder."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field

from ..host.disk import GIB
from ..host.egress.policy import PolicyError
from ..host.errors import HostError
from ..host.image import Image, recipe_for
from ..store import repo
from ..store.models import ComputerRow, Org
from .errors import ConflictError, ControlError, InvalidRequestError
from .fleet import Fleet
from .host_errors import from_host
from .names import check_env, check_labels, check_name, generate_name
from .states import State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CreateRequest:
    template: str = "base"
    name: str | None = None
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    idle_timeout: int | None = None  # seconds; None = the template's; 0 = never
    allow: tuple[str, ...] | None = None  # egress allowlist; None = the template's

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def validate(fleet: Fleet, req: CreateRequest) -> tuple[Image, int]:
    if req.name is not None:
        check_name(req.name)
    check_name(req.template, "template")
    check_labels(req.labels)
    check_env(req.env)
    if req.vcpus < 1 or req.memory_mib < 128:
        raise InvalidRequestError("ask for at least 1 vCPU and 128 MiB of memory")
    if req.allow is not None:
        try:
            fleet.reach.policy(list(req.allow))
        except PolicyError as exc:
            raise InvalidRequestError(str(exc), "invalid_rule") from exc
    if req.idle_timeout is not None and req.idle_timeout < 0:
        raise InvalidRequestError("idle_timeout is seconds, 0 (never) or more")
    fleet.capacity.check(req.vcpus, req.memory_mib)
    image = fleet.image_for(req.template)
    image_gib = -(-image.disk_size_bytes // GIB)
    disk_gib = req.disk_gib if req.disk_gib is not None else image_gib
    if disk_gib < image_gib:
        raise InvalidRequestError(
            f"a {disk_gib} GiB disk is smaller than the {req.template} image "
            f"({image_gib} GiB): ask for at least {image_gib} GiB",
            "disk_too_small",
        )
    # before anything is made: refused here leaves no record and no folder
    fleet.capacity.admit_here(fleet.runtime.data_dir, req.memory_mib, disk_gib)
    return image, disk_gib


def insert(
    fleet: Fleet,
    org: Org,
    req: CreateRequest,
    image: Image,
    disk_gib: int,
    idempotency_key: str | None,
) -> tuple[ComputerRow, bool]:
    """Insert the record in `creating`; or return the one this idempotency key made."""
    with fleet.db.session() as s:
        if idempotency_key:
            prior = repo.computer_by_idempotency_key(s, org.id, idempotency_key)
            if prior is not None:
                if prior.request_hash != req.digest():
                    raise ConflictError(
                        "this Idempotency-Key was used for a different request",
                        "idempotency_conflict",
                    )
                return prior, False
        name = req.name or generate_name()
        if repo.name_taken(s, org.id, name):
            raise ConflictError(
                f"a computer named {name!r} already exists: pick another name", "name_taken"
            )
        row = ComputerRow(
            id=repo.new_id("cmp_"),
            org_id=org.id,
            name=name,
            template=req.template,
            image=image.build_id,
            state=State.CREATING,
            vcpus=req.vcpus,
            memory_mib=req.memory_mib,
            disk_gib=disk_gib,
            env=req.env,
            allow=list(req.allow if req.allow is not None else recipe_for(req.template).allow),
            ports=[],
            idle_timeout=(
                req.idle_timeout
                if req.idle_timeout is not None
                else recipe_for(req.template).idle_timeout
            ),
            labels=req.labels,
            hypervisor="qemu",
            isolation="",
            idempotency_key=idempotency_key,
            request_hash=req.digest(),
        )
        s.add(row)
        s.flush()
        ev = repo.add_event(
            s, org.id, row.id, "computer.creating", f"creating from template {req.template}"
        )
    fleet.bus.publish(ev)
    return row, True


async def create(
    fleet: Fleet,
    org: Org,
    req: CreateRequest,
    idempotency_key: str | None = None,
    wait: bool = True,
) -> ComputerRow:
    image, disk_gib = validate(fleet, req)
    row, new = insert(fleet, org, req, image, disk_gib, idempotency_key)
    if not new:
        return row
    task = fleet.spawn(provision(fleet, row, image, disk_gib))
    if not wait:
        return row
    return await asyncio.shield(task)


async def provision(fleet: Fleet, row: ComputerRow, image: Image, disk_gib: int) -> ComputerRow:
    async with fleet.lock(row.id):
        try:
            machine, disk = await fleet.runtime.create(fleet.spec(row, disk_gib), image)
        except (HostError, OSError) as exc:
            error = (
                from_host(exc, "create", row.id)
                if isinstance(exc, HostError)
                else ControlError(f"create failed: {exc.strerror or exc}", "host_error")
            )
            log.warning("create of %s failed: %s", row.id, exc)
            fleet.record(row.id, State.ERROR, "computer.error", error.message,
                         last_error=error.message)  # fmt: skip
            raise error from exc
        await fleet.came_up(row.id, machine)
        return fleet.record(
            row.id,
            State.RUNNING,
            "computer.running",
            f"running ({machine.isolation}, disk {disk.method})",
            {"isolation": machine.isolation, "disk_clone": disk.method},
            isolation=machine.isolation,
            last_error=None,
        )
