"""Forks: N new computers from one computer as it is now, in one call. A running (or paused)
computer's forks carry on from its memory: its processes, open files and tmpfs, each with a new
identity (hostname, machine-id, SSH host keys, fresh entropy, the clock set) before it is handed
out; a stopped computer's forks boot on a copy of its disk. The source keeps running, paused only
while its memory is saved. All or nothing: the host makes every fork or none
(`HostRuntime.fork`), and the records follow it."""

from __future__ import annotations

import contextlib
import secrets

from ..host.door import HostError, faults
from ..store.models import ComputerRow, Org
from . import create as creating
from . import readiness, regions, snapshots
from .errors import InvalidRequestError, with_state
from .fleet import VERB_WAIT, Fleet
from .host_errors import from_host
from .names import check_name
from .provision import Plan
from .secrets import copy_bindings
from .states import HAS_MEMORY, State

MAX_FORKS = 16  # per call


def fork_names(source: str, count: int, prefix: str | None) -> list[str]:
    """`PREFIX` for one fork, `PREFIX-1..N` for several; without a prefix, the source's name and
    a random suffix each (so forking twice never collides)."""
    if not 1 <= count <= MAX_FORKS:
        raise InvalidRequestError(f"ask for 1 to {MAX_FORKS} forks at a time")
    if prefix is not None:
        check_name(prefix, "fork name")
        names = [prefix] if count == 1 else [f"{prefix}-{i}" for i in range(1, count + 1)]
    else:
        base = source[:52].rstrip("-")
        names = [f"{base}-{secrets.token_hex(3)}" for _ in range(count)]
    for name in names:
        check_name(name, "fork name")
    return names


def _plan(fleet: Fleet, row: ComputerRow) -> Plan:
    """What each fork is: its source's template, build, size, environment, policy and published
    ports (private; its secrets: `copy_bindings`)."""
    return Plan(
        template=row.template,
        image=fleet.image_of(row),
        vcpus=row.vcpus,
        memory_mib=row.memory_mib,
        disk_gib=row.disk_gib,
        env=dict(row.env),
        allow=list(row.allow),
        idle_timeout=row.idle_timeout,
        ports=tuple(p["port"] for p in row.ports),  # each private: a public one is published anew
        origin=row.id,
        host_id=row.host_id,
        region=row.region,
    )


def _drop(fleet: Fleet, children: list[ComputerRow], why: str) -> None:
    for child in children:
        fleet.remove_record(child.id, why)


async def fork(
    fleet: Fleet,
    org: Org,
    ref: str,
    count: int = 1,
    prefix: str | None = None,
    region: str | None = None,
) -> list[ComputerRow]:
    source = fleet.get(org, ref)
    names = fork_names(source.name, count, prefix)
    regions.check_fork(source.region, region)  # before anything is written
    async with fleet.acting(org, ref, "fork") as row:
        memory = row.state in HAS_MEMORY
        plan = _plan(fleet, row)
        host = fleet.host_of(row)
        # its children's RAM and disks, then the snapshot they are made from: the source's new
        # overlay and its memory (the children's hold counted; the source's old disk not)
        with (
            fleet.capacity.admit_here(
                host, row.memory_mib * count, row.disk_gib * count, vms=count
            ),
            snapshots.admitted(fleet, host, row, None, memory, "no fork was made"),
        ):
            return await _fork_locked(fleet, org, row, plan, names, memory)
    raise AssertionError("unreachable")


async def _fork_locked(
    fleet: Fleet, org: Org, row: ComputerRow, plan: Plan, names: list[str], memory: bool
) -> list[ComputerRow]:
    children: list[ComputerRow] = []
    try:  # a taken name refuses the call before anything runs
        for name in names:
            req = creating.CreateRequest(
                name=name, labels=dict(row.labels), e2b_metadata=row.e2b_metadata
            )
            children.append(creating.insert(fleet, org, req, plan, None)[0])
            copy_bindings(fleet, row.id, children[-1].id)
    except BaseException:
        _drop(fleet, children, "fork refused before anything ran (a name taken, or a quota)")
        raise
    faults.reached("fork.children_recorded")
    async with contextlib.AsyncExitStack() as held:  # no verb acts on a child until it runs
        try:  # (another node's verb on a child listed meanwhile is waited for)
            for child in children:
                await held.enter_async_context(
                    fleet.operating(child.id, "create", child.host_id, wait=VERB_WAIT)
                )
        except BaseException:
            _drop(fleet, children, "fork refused: a verb on one of its children did not end")
            raise
        return await _forked(fleet, row, plan, children, memory)
    raise AssertionError("unreachable")


async def _forked(
    fleet: Fleet, row: ComputerRow, plan: Plan, children: list[ComputerRow], memory: bool
) -> list[ComputerRow]:
    """The children recorded (and held) made on the source's host, or their records dropped."""
    machine = None
    try:
        if row.state == State.RUNNING:
            machine = await fleet.machine_locked(row)
        machines = await fleet.host_of(row).fork(
            machine,
            fleet.spec(row),
            plan.image,
            [fleet.spec(c, row.disk_gib) for c in children],
            memory=memory,
        )
    except HostError as exc:
        error = from_host(exc, "fork", row.id)
        _drop(fleet, children, error.message)
        if machine is not None and not machine.vm.alive():
            await fleet.vm_exited(row.id, "its VM died during a fork")
        now = await snapshots.state_after_failure(
            fleet, row.id, machine, "fork", "no fork was made"
        )
        raise with_state(error, now) from exc
    except BaseException:  # its source gone meanwhile, a cancelled request: no fork either
        _drop(fleet, children, "no fork was made")
        raise
    how = "memory: restored" if memory else "booted on a copy of its disk"
    made = []
    unready = await readiness.came_up_settled(fleet, list(zip(children, machines, strict=True)))
    for child, m, why in zip(children, machines, unready, strict=True):
        made.append(
            fleet.record(
                child.id,
                State.RUNNING,
                "computer.running",
                f"running ({m.isolation}), forked from {row.name}; {how}",
                {
                    "isolation": m.isolation,
                    "fork_of": row.id,
                    "memory": "restored" if memory else "lost",
                },
                isolation=m.isolation,
                memory="restored" if memory else "lost",
                memory_reason=None if memory else "forked from a stopped computer",
                identity_pending=None,
            )
        )
        if why is not None:
            readiness.not_ready(fleet, child.id, why)
    fleet.record(
        row.id,
        None,
        "computer.forked",
        f"forked into {', '.join(r.name for r in made)}",
        {"forks": [r.id for r in made], "memory": memory},
    )
    return made
