"""Pause and resume with memory, for `HostRuntime`: a computer's devices and RAM saved to its
state dir, durably and verifiably (memory.py), and a VM started from them again.

A resume maps the saved RAM privately (`memory-backend-file,share=off`: copy-on-write, clean
pages read from the page cache, written pages the VM's own anonymous memory, charged to its
cgroup) instead of copying it back into a RAM file first. The file leaves the state dir for the
VM's run dir (a rename) and is checked there, in one read pass, before QEMU starts; it is removed
when the VM process ends. Set SANBOX_RESTORE=copy for the former way (a verified copy into a
shared RAM file in the RAM dir), kept for comparison (benchmarks/pause.py).

A pause of a VM that runs from mapped memory reads its RAM out of the migration stream
(`memory.write_from_stream`); one of a VM with a shared RAM file copies the file (`memory.write`).
Either way the state has one form: device stream, sparse memory file, MACed manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent import AgentError
from ..data.layout import ComputerDir
from ..drivers import Driver
from ..errors import HostError
from ..image import Image
from ..saved import memory
from ..saved.memory import MemoryOutcome, PauseError, SavedState, StateError
from .machine import Machine, MachineSpec

if TYPE_CHECKING:  # runtime.py calls into this module
    from ..runtime import HostRuntime

MIB = 1024 * 1024

log = logging.getLogger(__name__)


def compat(spec: MachineSpec, image: Image, driver: Driver) -> dict[str, object]:
    """What a saved state must match to be loaded: the driver and its build, the size, the
    image."""
    return {
        "isolation": driver.isolation,
        "hypervisor_build": driver.build,
        "vcpus": spec.vcpus,
        "memory_mib": spec.memory_mib,
        "image": image.build_id,
    }


async def pause(rt: HostRuntime, machine: Machine, spec: MachineSpec, image: Image) -> SavedState:
    started = time.monotonic()
    cdir, vm = machine.dir, machine.vm
    tmp = cdir.state / f"{memory.VMSTATE}.tmp"
    try:
        cdir.state.mkdir(parents=True, exist_ok=True)
        ram_in_stream = await vm.save_state(tmp)  # on failure the vCPUs run again
    except (HostError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise PauseError(f"could not save the VM state: {exc}") from exc
    keys = compat(spec, image, await rt.hypervisor(image)), started, rt.memory_key
    try:
        if ram_in_stream:  # RAM mapped privately (a resumed VM): taken out of the stream
            size = spec.memory_mib * MIB
            saved = await asyncio.to_thread(
                memory.write_from_stream, cdir.state, tmp, size, *keys, vm.split_saved_state
            )
        else:
            ram = rt.data_dir.ram_file(spec.computer_id)
            saved = await asyncio.to_thread(memory.write, cdir.state, tmp, ram, *keys)
    except Exception as exc:  # whatever it was, the VM runs on as it was
        await vm.continue_running()
        if isinstance(exc, PauseError):
            raise
        words = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PauseError(f"could not write the saved state: {words}") from exc
    with contextlib.suppress(AgentError):
        await machine.agent.close()
    await vm.quit()
    await rt._kill_and_clean(vm)
    return saved


async def resume(rt: HostRuntime, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]:
    cdir = rt.data_dir.computer(spec.computer_id)
    hv = await rt.hypervisor(image)
    wanted = compat(spec, image, hv)
    try:  # usable at all? (missing, corrupt, incompatible); memory checked before the VM runs
        saved = await asyncio.to_thread(memory.load, cdir.state, wanted, rt.memory_key)
        machine = await _restore(rt, spec, image, cdir, saved)
    except StateError as exc:
        log.warning("%s: saved memory not used: %s", spec.computer_id, exc)
        await asyncio.to_thread(memory.discard, cdir.state)
        return await rt.start(spec, image), MemoryOutcome(False, exc.reason)
    except (HostError, AgentError, OSError) as exc:
        await asyncio.to_thread(memory.discard, cdir.state)
        outcome = MemoryOutcome(False, f"restore failed: {exc}")
        return await rt.start(spec, image), outcome
    await asyncio.to_thread(memory.discard, cdir.state)  # consumed: the guest moved on
    return machine, MemoryOutcome(True)


async def _restore(
    rt: HostRuntime, spec: MachineSpec, image: Image, cdir: ComputerDir, saved: SavedState
) -> Machine:
    if rt.settings.restore == "copy":  # copy saved memory back instead of mapping it
        ram = rt.data_dir.ram_file(spec.computer_id)
        await asyncio.to_thread(memory.restore_memory, cdir.state, saved, ram, rt.memory_key)
        mapped = None
    else:
        mapped = memory.mapped_file(cdir.run)
        await asyncio.to_thread(memory.claim_memory, cdir.state, saved, mapped, rt.memory_key)
    # used once: were the host to crash from here on, the disk would be ahead of it
    await asyncio.to_thread(memory.forget, cdir.state)
    return await run_saved(rt, spec, image, cdir.state / memory.VMSTATE, mapped)


async def run_saved(
    rt: HostRuntime, spec: MachineSpec, image: Image, vmstate: Path, memory_file: Path | None
) -> Machine:
    """A VM for `spec` (its computer dir and disk made already) started from a saved device
    state and the RAM in `memory_file`, running, its agent answering. `memory_file` is the VM's
    own saved memory (its run dir's `memory.mapped_file`, a resume), mapped privately; or a
    memory image many VMs map (a snapshot's), checked already (`memory.load`,
    `memory.verify_memory`): N VMs from one file share its clean pages. None: the RAM is in the
    shared RAM file in the RAM dir, filled already (SANBOX_RESTORE=copy, or a shared image
    copied there where QEMU cannot map it read-only).

    A shared image is mapped read-only (`VmSpec.memory_readonly`: root's, never the VM user's;
    QEMU >= 8.2) through a hard link in the VM's run dir (the file must be on the data
    filesystem), removed when its process ends; the snapshot may be deleted while they run
    (their mappings keep the pages; their pauses take RAM from the migration stream). QEMU 7.2
    opens a mapped file read-write (its `readonly=on` makes a ROM): a shared image is refused
    there (HostError), the caller copies it instead (machines/restore.py). On failure nothing
    of the VM is left."""
    hv = await rt.hypervisor(image)
    spec = await rt._with_network(spec)
    cdir = rt.data_dir.computer(spec.computer_id)
    vm_spec = rt._vm_spec(spec, image, cdir, restore=True)
    async with contextlib.AsyncExitStack() as undo:
        if memory_file is not None:
            mapped = memory.mapped_file(cdir.run)
            shared = memory_file != mapped
            if shared and not hv.capabilities.maps_read_only:
                raise HostError(
                    f"{hv.name} cannot map a shared memory image read-only: it is copied instead"
                )
            if shared:
                await asyncio.to_thread(memory.link_mapped, memory_file, mapped)
            undo.callback(mapped.unlink, missing_ok=True)
            vm_spec = replace(
                vm_spec, memory_file=mapped, memory_private=True, memory_readonly=shared
            )
        vm = await rt._launch(hv, vm_spec)
        undo.push_async_callback(rt._kill_and_clean, vm)
        await vm.load_state(vmstate)
        agent = await rt.wait_ready(vm, cdir, timeout=30.0)
        with contextlib.suppress(AgentError):
            await agent.set_clock(time.time())  # the guest slept: its clock is behind
        undo.pop_all()
        return Machine(spec.computer_id, cdir, vm, agent)
    raise AssertionError("unreachable")
