"""The host agent's calls (`POST /v1/host/calls/{name}`): each decodes its arguments (wire.py),
calls the door (`HostRuntime`), keeps what the agent must hold (a machine it made, handed over to
the shared guest connection; one that ended, forgotten) and encodes the answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...host.door import GIB, HostError, Machine, VmNotRunningError
from ...host.runtime import HostRuntime
from . import wire
from .host_egress import CALLS as EGRESS_CALLS
from .host_egress import Call as EgressCall

if TYPE_CHECKING:
    from .agent import HostAgent

log = logging.getLogger(__name__)
Handler = Callable[[HostRuntime, "HostAgent", dict[str, Any]], Awaitable[Any]]


# the calls: each decodes its arguments, calls the door, encodes the answer ------------------


async def _create(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec, image = wire.spec_in(a["spec"]), _image(rt, a["image"])
    disk_gib = spec.disk_gib or -(-image.disk_size_bytes // GIB)  # none named: the image's
    with agent.room.held(spec.memory_mib, disk_gib):
        machine, disk = await rt.create(spec, image)
    await agent.hand_over(machine)
    return {"machine": _machine_out(machine), "disk": wire.disk_out(disk)}


async def _start(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec = wire.spec_in(a["spec"])
    with agent.room.held(spec.memory_mib, 0, spec.computer_id):
        machine = await rt.start(spec, _image(rt, a["image"]))
    return _machine_out(await agent.hand_over(machine))


async def _attach(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    vm = rt.attach_vm(a["computer_id"])
    return None if vm is None else {"computer_id": a["computer_id"], "isolation": vm.isolation}


async def _shutdown(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    machine = await agent.machine(a["computer_id"])
    try:
        return await rt.shutdown(machine, float(a["timeout"]))
    finally:
        await agent.ended(a["computer_id"])


async def _kill(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await rt.kill(a["computer_id"])
    await agent.ended(a["computer_id"])


async def _destroy(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await agent.ended(a["computer_id"])
    await rt.destroy(a["computer_id"])


async def _export_disk(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    computer_id, image = a["computer_id"], _image(rt, a["image"])
    with agent.room.exported(await asyncio.to_thread(rt.export_bytes, computer_id)):
        made = await rt.export_disk(computer_id, image)
    return made.out()


async def _export_snapshot(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    snapshot_id, image = a["snapshot_id"], _image(rt, a["image"])
    with agent.room.exported(await asyncio.to_thread(rt.export_bytes, snapshot_id)):
        made = await rt.export_snapshot(snapshot_id, image)
    return made.out()


async def _drop_export(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await rt.drop_export(a["item_id"])


async def _quarantine(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await agent.ended(a["computer_id"])
    to = await rt.quarantine(a["computer_id"])
    log.warning("computer %s is not this host's to run: set aside in %s", a["computer_id"], to)
    return to


async def _pause(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec = wire.spec_in(a["spec"])
    machine = await agent.machine(spec.computer_id)
    with agent.room.paused(spec.memory_mib):
        saved = await rt.pause(machine, spec, _image(rt, a["image"]))
    await agent.ended(spec.computer_id)
    return wire.plain(saved)


async def _resume(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec = wire.spec_in(a["spec"])
    with agent.room.held(spec.memory_mib, 0, spec.computer_id):
        machine, outcome = await rt.resume(spec, _image(rt, a["image"]))
    await agent.hand_over(machine)
    return {"machine": _machine_out(machine), "outcome": wire.outcome_out(outcome)}


async def _drop_saved_memory(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await rt.drop_saved_memory(a["computer_id"])


async def _grow_disk(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await rt.grow_disk(await agent.machine(a["computer_id"]), int(a["size_bytes"]))


async def _console_lines(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    return await rt.console_lines(a["computer_id"], int(a["count"]))


async def _disk_error(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    vm = rt.attach_vm(a["computer_id"])
    return None if vm is None else await vm.disk_error()


async def _frozen(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    vm = rt.attach_vm(a["computer_id"])
    return None if vm is None else await vm.frozen()


async def _continue_running(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    """The vCPUs of a VM a failed save left stopped run again (the control plane's repair)."""
    vm = rt.attach_vm(a["computer_id"])
    if vm is None:
        raise VmNotRunningError(f"{a['computer_id']} has no VM on this host")
    await vm.continue_running()


async def _snapshot(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec = wire.spec_in(a["spec"])
    machine = await agent.machine(spec.computer_id) if a["running"] else None
    image, memory = _image(rt, a["image"]), bool(a["memory"])
    live = bool(a.get("live", True))  # a control plane before `live` asks the host's default
    with agent.room.snapshot(a["computer_id"], spec.disk_gib or 0, spec.memory_mib * memory):
        manifest = await rt.snapshot(
            a["snapshot_id"], a["computer_id"], machine, spec, image, memory, live=live
        )
    return wire.plain(manifest)


async def _create_from_snapshot(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec = wire.spec_in(a["spec"])
    # its disk is at least the snapshot's (restore.disk_from_snapshot), whatever the spec names
    snap = await asyncio.to_thread(rt.snapshots.load, a["snapshot_id"])
    disk_gib = max(spec.disk_gib or 0, -(-snap.disk_bytes // GIB))
    with agent.room.held(spec.memory_mib, disk_gib):
        machine, outcome = await rt.create_from_snapshot(
            spec, _image(rt, a["image"]), a["snapshot_id"]
        )
    await agent.hand_over(machine)
    return {"machine": _machine_out(machine), "outcome": wire.outcome_out(outcome)}


async def _fork(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    spec = wire.spec_in(a["spec"])
    machine = await agent.machine(spec.computer_id) if a["running"] else None
    new_specs = [wire.spec_in(s) for s in a["new_specs"]]
    memory_mib, memory = sum(s.memory_mib for s in new_specs), bool(a["memory"])
    with (
        agent.room.held(memory_mib, sum(s.disk_gib or 0 for s in new_specs), vms=len(new_specs)),
        agent.room.snapshot(spec.computer_id, spec.disk_gib or 0, spec.memory_mib * memory),
    ):
        made = await rt.fork(machine, spec, _image(rt, a["image"]), new_specs, memory)
    return [_machine_out(await agent.hand_over(m)) for m in made]


async def _finish_copy(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    machine = await agent.machine(a["computer_id"])
    try:
        await rt.finish_copy(machine, a["hostname"], int(a["size_bytes"]))
    finally:
        await agent.hand_over(machine)


async def _delete_snapshot(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await rt.delete_snapshot(a["snapshot_id"])


async def _delete_snapshots(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    return await rt.delete_snapshots(list(a["snapshot_ids"]))


async def _snapshot_layers(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    return await rt.snapshot_layers(list(a["snapshot_ids"]))


async def _gc_layers(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    return await rt.gc_layers()


async def _remove_build(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    await asyncio.to_thread(rt.remove_build, rt.build(a["build_id"]))


async def _sweep(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
    return await rt.sweep(set(a["known"]))


def _egress_call(call: EgressCall) -> Handler:
    async def handler(rt: HostRuntime, agent: HostAgent, a: dict[str, Any]) -> Any:
        if agent.egress is None:
            raise HostError("this host runs no egress gateway (it makes no network of its own)")
        return await call(agent.egress, a)

    return handler


def _image(rt: HostRuntime, data: dict[str, Any]) -> Any:
    """The image the control plane named, found on this host (never a path it sent)."""
    return rt.build(str(data["build_id"]))


def _machine_out(machine: Machine) -> dict[str, Any]:
    return {"computer_id": machine.computer_id, "isolation": machine.vm.isolation}


CALLS: dict[str, Handler] = {
    "create": _create,
    "start": _start,
    "attach": _attach,
    "shutdown": _shutdown,
    "kill": _kill,
    "destroy": _destroy,
    "quarantine": _quarantine,
    "export_disk": _export_disk,
    "export_snapshot": _export_snapshot,
    "drop_export": _drop_export,
    "pause": _pause,
    "resume": _resume,
    "drop_saved_memory": _drop_saved_memory,
    "grow_disk": _grow_disk,
    "console_lines": _console_lines,
    "disk_error": _disk_error,
    "frozen": _frozen,
    "continue_running": _continue_running,
    "snapshot": _snapshot,
    "create_from_snapshot": _create_from_snapshot,
    "fork": _fork,
    "finish_copy": _finish_copy,
    "delete_snapshot": _delete_snapshot,
    "delete_snapshots": _delete_snapshots,
    "snapshot_layers": _snapshot_layers,
    "gc_layers": _gc_layers,
    "remove_build": _remove_build,
    "sweep": _sweep,
    **{name: _egress_call(call) for name, call in EGRESS_CALLS.items()},
}
